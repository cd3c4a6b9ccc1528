"""The package as a user installs it: `pip install ./python`
offline into a venv made with --system-site-packages, with the library of a
`cmake --install` prefix found through pkg-config, used from outside the
source tree.

Needs the build (O3M_BIN_DIR, set by the CTest test python_package) and a
Python with venv, pip, setuptools and wheel (Debian: python3-venv,
python3-pip, python3-setuptools, python3-wheel); skipped, saying which is
missing, otherwise."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _missing_tools() -> list[str]:
    missing = [m for m in ("venv", "ensurepip", "pip", "setuptools", "wheel")
               if importlib.util.find_spec(m) is None]
    if shutil.which("cmake") is None:
        missing.append("cmake")
    if shutil.which("pkg-config") is None:
        missing.append("pkg-config")
    return missing


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """A temporary prefix (cmake --install) and a venv with o3m pip-installed:
    {"python": the venv's python, "env": the environment to run it in}."""
    missing = _missing_tools()
    if missing:
        pytest.skip(f"cannot pip-install into a venv: {', '.join(missing)} missing "
                    "(scripts/setup-deps.sh installs them)")
    bin_dir = os.environ.get("O3M_BIN_DIR")
    if not bin_dir or not Path(bin_dir).parent.joinpath("cmake_install.cmake").exists():
        pytest.skip("no build to install: set O3M_BIN_DIR to the build's bin/")
    tmp = tmp_path_factory.mktemp("install")
    prefix = tmp / "prefix"
    subprocess.run(["cmake", "--install", str(Path(bin_dir).parent), "--prefix", str(prefix)],
                   check=True, capture_output=True)
    # A copy of python/, so the build's own build/ and o3m.egg-info land
    # in the temporary folder, not in the source tree.
    src = tmp / "python"
    shutil.copytree(ROOT / "python", src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, capture_output=True)
    # Offline as on a fresh Debian host: no pip configuration, no index.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIP_") and k not in ("PYTHONPATH", "O3M_LIB", "O3M_INCLUDE")}
    env["PIP_CONFIG_FILE"] = os.devnull
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation",
                        "--no-index", str(src)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    env["PKG_CONFIG_PATH"] = str(prefix / "lib" / "pkgconfig")
    return {"python": str(venv / "bin" / "python"), "env": env, "prefix": prefix, "tmp": tmp}


def test_version_is_the_release():
    """pyproject.toml's version is the VERSION file's."""
    version = (ROOT / "VERSION").read_text().strip()
    m = re.search(r'^version = "([^"]+)"', (ROOT / "python" / "pyproject.toml").read_text(), re.M)
    assert m and m.group(1) == version


def test_installed_package_finds_the_prefix_through_pkg_config(installed):
    """The venv's o3m is the installed one (not the source tree's) and loads
    the prefix's libo3m found through pkg-config; its engine decides."""
    code = ("import o3m; g = o3m.Engine(2, alpha=0); g.update([0, 1], 1.0); "
            "print(o3m.__file__); print(o3m.library_path); print(o3m.__version__); "
            "print(g.choose([[1, 0], [0, 1]])[0])")
    out = subprocess.run([installed["python"], "-c", code], env=installed["env"],
                         cwd=installed["tmp"], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    assert out[0].startswith(str(installed["tmp"] / "venv")), out
    assert Path(out[1]).resolve() == (installed["prefix"] / "lib" / "libo3m.so").resolve(), out
    assert out[2] == (ROOT / "VERSION").read_text().strip(), out
    assert out[3] == "1", out


def test_installed_package_without_a_library_says_where_to_look(installed):
    """No prefix on PKG_CONFIG_PATH and none elsewhere: the import names the
    ways to point at the library."""
    env = dict(installed["env"], PKG_CONFIG_PATH=str(installed["tmp"] / "nowhere"))
    r = subprocess.run([installed["python"], "-c", "import o3m"], env=env,
                       cwd=installed["tmp"], capture_output=True, text=True)
    if r.returncode == 0:
        pytest.skip("a libo3m is installed on this system's library path")
    assert "libo3m not found" in r.stderr and "PKG_CONFIG_PATH" in r.stderr and \
        "O3M_LIB" in r.stderr, r.stderr


def test_installed_package_runs_the_example(installed, federation):
    """The loop of docs/library.md, run by the venv's python against the federation."""
    conf, name = federation
    r = subprocess.run([installed["python"], str(ROOT / "python" / "examples" / "recommend_loop.py"),
                        "--config", conf, "--as", name], env=installed["env"],
                       cwd=installed["tmp"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("clicks=") and "Stats(rounds=" in r.stdout, r.stdout
