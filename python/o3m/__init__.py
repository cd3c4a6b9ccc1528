"""O3M from Python: the bandit engine in process (Engine) and the client of
a running active participant (APClient), both over the installed C library
libo3m through cffi; no protocol code is written in Python.

    from o3m import APClient, Engine
"""
from ._native import O3MError, ffi, lib, library_path
from .client import APClient, Recommendation, Stats
from .engine import Engine

__version__: str = ffi.string(lib.o3m_version()).decode()
"""The release of the loaded libo3m."""

__all__ = ["APClient", "Engine", "O3MError", "Recommendation", "Stats", "__version__",
           "library_path"]
