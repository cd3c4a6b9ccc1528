"""The C library seen from Python: finds libo3m and its headers, hands the
headers' declarations to cffi (ABI mode: no compiler at import time) and
turns O3M error codes into exceptions.

The declarations are not copied here: they are the text between the
``O3M_CDEF_BEGIN`` and ``O3M_CDEF_END`` markers of ``o3m/o3m.h`` and
``o3m/o3m_error.h``, read when the package is imported, so the binding
cannot drift from the header.

Where things are looked for, first hit wins:

* the library: ``$O3M_LIB`` (a path to ``libo3m.so``); the prefix this
  package is installed in (``P/lib/python3/dist-packages/o3m`` next to
  ``P/lib/libo3m.so.MAJOR``); the ``libdir`` that ``pkg-config o3m``
  names (so ``pip install ./python`` into a venv finds a prefix through
  ``$PKG_CONFIG_PATH``, as a C program built against it would); the
  system's library path (``ctypes.util.find_library("o3m")``);
* the headers: ``$O3M_INCLUDE`` (the directory holding ``o3m/o3m.h``); the
  ``include`` directory beside the library's ``lib`` directory; the source
  tree this package sits in (``lib/include`` and ``common``).
"""
from __future__ import annotations

import ctypes.util
import os
import re
import subprocess
from pathlib import Path
from typing import Optional

import cffi

_HERE = Path(__file__).resolve().parent
_MAJOR = 0  # the soname's major version this package speaks to


class O3MError(Exception):
    """A failed O3M call: ``code`` (negative), ``name`` (``"INVAL"``,
    ``"NOTFOUND"``, ...) and ``message``, the sentence naming the problem."""

    def __init__(self, code: int, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.code = code
        self.name = name
        self.message = message


def _find_library() -> str:
    env = os.environ.get("O3M_LIB")
    if env:
        if not Path(env).exists():
            raise OSError(f"O3M_LIB={env}: no such file")
        return env
    # P/lib/python3/dist-packages/o3m -> P/lib
    installed = _HERE.parent.parent.parent / f"libo3m.so.{_MAJOR}"
    if installed.exists():
        return str(installed)
    from_pc = _pkg_config_libdir()
    if from_pc and (from_pc / f"libo3m.so.{_MAJOR}").exists():
        return str((from_pc / f"libo3m.so.{_MAJOR}").resolve())
    found = ctypes.util.find_library("o3m")
    if found:
        return found
    raise OSError("libo3m not found: install the library (cmake --install build), "
                  "add its P/lib/pkgconfig to PKG_CONFIG_PATH "
                  "or set O3M_LIB to the path of libo3m.so")


def _pkg_config_libdir() -> Optional[Path]:
    """The libdir of ``pkg-config o3m``, or None without pkg-config or o3m.pc."""
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "o3m"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    libdir = out.stdout.strip()
    return Path(libdir) if out.returncode == 0 and libdir else None


def _header_dirs(lib: str) -> list[Path]:
    """Directories that may hold o3m.h and o3m_error.h, best first."""
    dirs = []
    env = os.environ.get("O3M_INCLUDE")
    if env:
        dirs.append(Path(env) / "o3m")
    libdir = Path(lib).resolve().parent
    for up in (libdir.parent, libdir.parent.parent):  # lib/ or lib/<multiarch>/
        dirs.append(up / "include" / "o3m")
    src = _HERE.parent.parent  # the source tree: python/o3m -> .
    dirs += [src / "lib" / "include" / "o3m", src / "common"]
    return dirs


def _cdef_of(name: str, dirs: list[Path]) -> str:
    for d in dirs:
        f = d / name
        if f.is_file():
            text = f.read_text()
            m = re.search(r"/\* O3M_CDEF_BEGIN \*/(.*)/\* O3M_CDEF_END \*/", text, re.S)
            if not m:
                raise OSError(f"{f}: no O3M_CDEF_BEGIN ... O3M_CDEF_END section")
            return m.group(1)
    raise OSError(f"{name} not found in {', '.join(map(str, dirs))} (set O3M_INCLUDE)")


def _load() -> tuple[cffi.FFI, object, str]:
    path = _find_library()
    dirs = _header_dirs(path)
    ffi = cffi.FFI()
    ffi.cdef(_cdef_of("o3m_error.h", dirs))
    ffi.cdef(_cdef_of("o3m.h", dirs))
    return ffi, ffi.dlopen(path), path


ffi, lib, library_path = _load()


def new_err():
    """A fresh ``o3m_err`` for one call."""
    return ffi.new("o3m_err *")


def check(rc: int, err=None) -> None:
    """Raises O3MError unless rc is 0."""
    if rc == 0:
        return
    name = ffi.string(lib.o3m_errname(rc)).decode()
    msg = ffi.string(lib.o3m_err_message(err)).decode() if err is not None else \
        ffi.string(lib.o3m_strerror(rc)).decode()
    raise O3MError(rc, name, msg)


def options(pairs: dict[str, Optional[object]]):
    """A NULL-terminated ``char *[]`` of "key=value" strings for the pairs whose
    value is not None, and the buffers that must live as long as it."""
    keep = []
    for k, v in pairs.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = int(v)
        keep.append(ffi.new("char[]", f"{k}={v}".encode()))
    arr = ffi.new("char *[]", keep + [ffi.NULL])
    return arr, keep
