"""Fixtures of the Python package's tests.

The package is imported from this source tree (python/). The library is
libo3m.so of $O3M_LIB (the CTest test python_package sets it to the build's
one). The end-to-end tests need a running federation: run them under
tests/with-federation.sh, which exports O3M_FED_CONF and O3M_FED_CLIENT, as
the CTest test does:

    tests/with-federation.sh build/bin -- env O3M_LIB=build/lib/libo3m.so \\
        O3M_BIN_DIR=build/bin python3 -m pytest python/tests

Without those variables the tests that need them are skipped, saying why."""
import os
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PYTHON_DIR))


@pytest.fixture(scope="session")
def federation() -> tuple[str, str]:
    """(config path, client name) of the running federation."""
    conf, client = os.environ.get("O3M_FED_CONF"), os.environ.get("O3M_FED_CLIENT")
    if not conf or not client:
        pytest.skip("no federation: run under tests/with-federation.sh (O3M_FED_CONF)")
    return conf, client


@pytest.fixture(scope="session")
def o3m_eval() -> str:
    """Path of the o3m-eval binary of the build under test."""
    bin_dir = os.environ.get("O3M_BIN_DIR")
    if not bin_dir or not Path(bin_dir, "o3m-eval").exists():
        pytest.skip("no o3m-eval: set O3M_BIN_DIR to the build's bin/")
    return str(Path(bin_dir, "o3m-eval"))
