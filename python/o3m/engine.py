"""The bandit engine (LinUCB and linear Thompson sampling, shared and
disjoint) in process, over ``o3m_engine_*`` of ``o3m/o3m.h``."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

from ._native import check, ffi, lib, new_err, options

ArrayLike = Union[np.ndarray, Sequence[float], Sequence[Sequence[float]]]


class Engine:
    """One policy: ``choose`` among candidate contexts, ``update`` with the
    reward of what was played.

    The options are the ``[policy]`` keys of the federation config (``lam``
    stands for ``lambda``, a Python keyword); None keeps the C default. Bad
    options raise O3MError naming them. Contexts are float64; a matrix of
    contexts is K x d, one row per candidate. Not thread-safe: use one engine
    per thread or serialize calls.
    """

    def __init__(self, d: int, *, algo: str = "linucb", model: str = "shared",
                 n_arms: Optional[int] = None, alpha: Optional[float] = None,
                 lam: Optional[float] = None, v: Optional[float] = None,
                 seed: Optional[int] = None, max_candidates: Optional[int] = None,
                 refactor_every: Optional[int] = None) -> None:
        opts, _keep = options({"algo": algo, "model": model, "d": d, "n_arms": n_arms,
                               "alpha": alpha, "lambda": lam, "v": v, "seed": seed,
                               "max_candidates": max_candidates,
                               "refactor_every": refactor_every})
        out = ffi.new("o3m_engine **")
        err = new_err()
        check(lib.o3m_engine_create(out, opts, err), err)
        self._g = ffi.gc(out[0], lib.o3m_engine_destroy)
        self.d: int = lib.o3m_engine_dim(self._g)
        self.n_models: int = lib.o3m_engine_n_models(self._g)

    def close(self) -> None:
        """Frees the engine now (otherwise when it is garbage collected)."""
        if self._g is not None:
            ffi.gc(self._g, None)
            lib.o3m_engine_destroy(self._g)
            self._g = None

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def updates(self) -> int:
        """Number of updates applied so far."""
        return int(lib.o3m_engine_updates(self._g))

    def _contexts(self, X: ArrayLike):
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.d:
            raise ValueError(f"contexts must be K x {self.d}, got shape {X.shape}")
        return X

    @staticmethod
    def _arms(arms: Optional[ArrayLike], K: int):
        if arms is None:
            return None, ffi.NULL
        a = np.ascontiguousarray(arms, dtype=np.intc)
        if a.shape != (K,):
            raise ValueError(f"arms must hold one arm per candidate ({K}), got shape {a.shape}")
        return a, ffi.from_buffer("int[]", a)

    def choose(self, X: ArrayLike, arms: Optional[ArrayLike] = None) -> tuple[int, float]:
        """Chooses among the K candidates whose contexts are the rows of X;
        arms gives each candidate's arm for the disjoint model (default: row
        k is arm k). Returns (candidate index, its score). Ties go to the
        lowest index."""
        X = self._contexts(X)
        a, ap = self._arms(arms, X.shape[0])
        chosen = ffi.new("int *")
        score = ffi.new("double *")
        err = new_err()
        check(lib.o3m_engine_choose(self._g, X.shape[0], ffi.from_buffer("double[]", X), ap,
                                    chosen, score, err), err)
        return int(chosen[0]), float(score[0])

    def scores(self, X: ArrayLike,
               arms: Optional[ArrayLike] = None) -> tuple[np.ndarray, np.ndarray]:
        """Per-candidate (mean, var) without sampling: mean = x . theta and
        var = x^T Lambda^-1 x, so LinUCB's score is mean + alpha sqrt(var)."""
        X = self._contexts(X)
        K = X.shape[0]
        a, ap = self._arms(arms, K)
        mean = np.empty(K)
        var = np.empty(K)
        err = new_err()
        check(lib.o3m_engine_scores(self._g, K, ffi.from_buffer("double[]", X), ap,
                                    ffi.from_buffer("double[]", mean),
                                    ffi.from_buffer("double[]", var), err), err)
        return mean, var

    def update(self, x: ArrayLike, reward: float, arm: int = 0) -> None:
        """Learns reward for context x (d values) played on arm (ignored by
        the shared model). A non-finite x or reward is refused (O3MError
        NONFINITE) and changes nothing."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.shape != (self.d,):
            raise ValueError(f"x must hold {self.d} values, got shape {x.shape}")
        err = new_err()
        check(lib.o3m_engine_update(self._g, int(arm), ffi.from_buffer("double[]", x),
                                    float(reward), err), err)

    def theta(self, arm: int = 0) -> np.ndarray:
        """theta of the shared model, or of one arm of the disjoint model."""
        out = np.empty(self.d)
        err = new_err()
        check(lib.o3m_engine_theta(self._g, int(arm), ffi.from_buffer("double[]", out), err),
              err)
        return out

    def state(self) -> bytes:
        """The whole state as bytes (the C engine's state image)."""
        n = lib.o3m_engine_state_size(self._g)
        buf = ffi.new("char[]", n)
        err = new_err()
        check(lib.o3m_engine_state_export(self._g, buf, n, err), err)
        return bytes(ffi.buffer(buf, n))

    def load_state(self, image: bytes) -> None:
        """Replaces the state with one saved by state() from an engine with
        the same algo, model, d, n_arms and lambda; the state is unchanged
        if the image is refused."""
        err = new_err()
        check(lib.o3m_engine_state_import(self._g, image, len(image), err), err)
