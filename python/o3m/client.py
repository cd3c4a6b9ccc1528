"""The client of a running active participant (o3m-active): Recommend,
Reward, Stats and the health check over gRPC with mutual TLS, through
``o3m_ap_client_*`` of ``o3m/o3m.h`` (the same code as o3m-cli)."""
from __future__ import annotations

import numbers
import threading
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ._native import check, ffi, lib, new_err, options

# The limits of o3m.h (the federation's, common/o3m_limits.h): the longest
# id in bytes and one past the largest arm.
MAX_ID: int = lib.O3M_API_MAX_ID
MAX_ARMS: int = lib.O3M_API_MAX_ARMS


def _id_bytes(what: str, v: object) -> bytes:
    """An id as the C API takes it: a str without NUL, at most MAX_ID bytes
    of UTF-8. Anything else raises rather than reach the wire changed
    (``str(None)`` is "None"; C would cut the id at a NUL)."""
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a str, not {type(v).__name__}")
    if "\0" in v:
        raise ValueError(f"{what} {v!r} holds a NUL character")
    b = v.encode()
    if len(b) > MAX_ID:
        raise ValueError(f"{what} is {len(b)} bytes of UTF-8, at most {MAX_ID}")
    return b


def _arms_array(arms: Sequence[int], K: int) -> np.ndarray:
    """arms as the C API's uint32_t[K]: integers in 0..MAX_ARMS-1, checked
    before the conversion, which would wrap -1 to 4294967295."""
    if isinstance(arms, np.ndarray):
        if arms.dtype.kind not in "iu":
            raise TypeError(f"arms must be integers, not an array of {arms.dtype}")
        if arms.shape != (K,):
            raise ValueError(f"arms must hold one arm per item ({K}), got shape {arms.shape}")
        vals = arms.tolist()
    else:
        vals = list(arms)
        if len(vals) != K:
            raise ValueError(f"arms must hold one arm per item ({K}), got {len(vals)}")
    for k, a in enumerate(vals):
        if isinstance(a, bool) or not isinstance(a, numbers.Integral):
            raise TypeError(f"arms[{k}] must be an int, not {type(a).__name__}")
        if not 0 <= a < MAX_ARMS:
            raise ValueError(f"arms[{k}] = {a} is not in 0..{MAX_ARMS - 1}")
    return np.array(vals, dtype=np.uint32)


@dataclass(frozen=True)
class Recommendation:
    """What recommend returned: ``decision`` is the ticket for reward."""
    decision: int
    candidate: int
    item: str
    score: float
    mask_id: int
    # Decided by the active participant's local model because these passive
    # parties were missing (lower quality; its reward teaches that model).
    degraded: bool = False
    missing: tuple = ()


@dataclass(frozen=True)
class Stats:
    """The active participant's counters. A client is answered its own view
    (``per_client`` true, ``client`` its name): ``rounds``, ``pending`` and
    ``expired`` count its own decisions alone, ``updates`` and ``theta_norm``
    are the shared model's. The operator (the active party's own certificate
    or a name of ``metrics_clients``) is answered the whole federation's
    (``per_client`` false). See SECURITY.md, "Stats by who asks"."""
    rounds: int
    updates: int
    pending: int
    expired: int
    theta_norm: float
    algo: str
    model: str
    per_client: bool = False
    client: str = ""


class APClient:
    """A connection to the active participant, configured like o3m-cli:
    ``config`` and ``as_`` (o3m-cli's ``--config F --as NAME``), or ``cert``,
    ``key`` and ``ca`` (with ``target`` or ``config``), or ``insecure=True``;
    ``target``, ``server_name``, ``deadline_ms`` and ``wait_for_ready`` as
    o3m-cli's options of those names. The client's certificate is checked
    here; the connection is made at the first call. Errors raise O3MError
    with the active participant's code and message (``NOTFOUND`` for an
    unknown user, ``PERM`` for a caller the config does not name as a
    client, ``UNAVAILABLE`` when it cannot be reached, ...).

    A client may be shared between threads: its calls take a lock of the
    client's, so they run one at a time on its connection (the C handle
    keeps each reply until its next call, and is not thread-safe). Threads
    that want calls in parallel open a client each.

    Ids (user, items) must be str without NUL, at most ``MAX_ID`` bytes of
    UTF-8; arms ints in 0..``MAX_ARMS`` - 1. Anything else raises TypeError
    (None, bytes, a number for an id; a float for an arm) or ValueError (a
    NUL, a longer id, a negative or too large arm) before a call is sent."""

    def __init__(self, *, config: Optional[str] = None, as_: Optional[str] = None,
                 cert: Optional[str] = None, key: Optional[str] = None,
                 ca: Optional[str] = None, target: Optional[str] = None,
                 server_name: Optional[str] = None, deadline_ms: Optional[int] = None,
                 wait_for_ready: bool = False, insecure: bool = False) -> None:
        opts, _keep = options({"config": config, "as": as_, "cert": cert, "key": key, "ca": ca,
                               "target": target, "server-name": server_name,
                               "deadline-ms": deadline_ms,
                               "wait-for-ready": wait_for_ready or None,
                               "insecure": insecure or None})
        out = ffi.new("o3m_ap_client **")
        err = new_err()
        check(lib.o3m_ap_client_open(out, opts, err), err)
        self._lock = threading.Lock()
        self._c = ffi.gc(out[0], lib.o3m_ap_client_close)

    def _handle(self):
        """The C handle, under self._lock; ValueError once closed."""
        if self._c is None:
            raise ValueError("the client is closed")
        return self._c

    def close(self) -> None:
        """Closes the connection now (otherwise when garbage collected);
        waits for a call of another thread to end."""
        with self._lock:
            if self._c is not None:
                ffi.gc(self._c, None)
                lib.o3m_ap_client_close(self._c)
                self._c = None

    def __enter__(self) -> "APClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def recommend(self, user: str, items: Sequence[str],
                  arms: Optional[Sequence[int]] = None,
                  own_features: Optional[np.ndarray] = None) -> Recommendation:
        """Recommends one of items for user. arms: one arm per item (disjoint
        model). own_features: the active party's own feature rows of the
        candidates, K x d_0."""
        c_user = _id_bytes("user", user)
        if isinstance(items, (str, bytes)):
            raise TypeError("items must be a sequence of str, not one "
                            f"{type(items).__name__}")
        items = list(items)
        K = len(items)
        keep = [ffi.new("char[]", _id_bytes(f"items[{k}]", i)) for k, i in enumerate(items)]
        c_items = ffi.new("char *[]", keep)
        c_arms = ffi.NULL
        if arms is not None:
            a = _arms_array(arms, K)
            c_arms = ffi.from_buffer("uint32_t[]", a)
        c_own, n_own = ffi.NULL, 0
        if own_features is not None:
            own = np.ascontiguousarray(own_features, dtype=np.float64)
            if own.ndim != 2 or own.shape[0] != K:
                raise ValueError(f"own_features must be {K} x d_0, got shape {own.shape}")
            c_own, n_own = ffi.from_buffer("double[]", own), own.size
        out = ffi.new("o3m_recommendation *")
        err = new_err()
        buf = ffi.new("char[256]")
        # The degraded answer is the handle's last recommendation's: read
        # under the same lock, before another thread's call replaces it.
        with self._lock:
            rc = lib.o3m_ap_client_recommend(self._handle(), c_user, K, c_items, c_arms, c_own,
                                             n_own, out, err)
            degraded = rc == 0 and bool(lib.o3m_ap_client_degraded(self._c, buf, 256))
        check(rc, err)
        missing = tuple(ffi.string(buf).decode().split(",")) if degraded else ()
        return Recommendation(int(out.decision), int(out.candidate), items[out.candidate],
                              float(out.score), int(out.mask_id), degraded, missing)

    def reward(self, decision: int, reward: float) -> int:
        """Rewards a decision (once); returns the policy's update count."""
        if isinstance(decision, bool) or not isinstance(decision, numbers.Integral):
            raise TypeError(f"decision must be an int, not {type(decision).__name__}")
        if not 0 <= decision < 2**64:
            raise ValueError(f"decision {decision} is not in 0..2**64-1")
        updates = ffi.new("uint64_t *")
        err = new_err()
        with self._lock:
            rc = lib.o3m_ap_client_reward(self._handle(), int(decision), float(reward), updates,
                                          err)
        check(rc, err)
        return int(updates[0])

    def stats(self) -> Stats:
        """The active participant's counters."""
        s = ffi.new("o3m_stats *")
        err = new_err()
        buf = ffi.new("char[]", 256)
        with self._lock:
            rc = lib.o3m_ap_client_stats(self._handle(), s, err)
            per_client = bool(lib.o3m_ap_client_stats_per_client(self._handle(), buf, 256))
        check(rc, err)
        return Stats(int(s.rounds), int(s.updates), int(s.pending), int(s.expired),
                     float(s.theta_norm), ffi.string(s.algo).decode(),
                     ffi.string(s.model).decode(), per_client,
                     ffi.string(buf).decode() if per_client else "")

    def health(self) -> bool:
        """True when the server answers the gRPC health check SERVING."""
        serving = ffi.new("int *")
        err = new_err()
        with self._lock:
            rc = lib.o3m_ap_client_health(self._handle(), serving, err)
        check(rc, err)
        return bool(serving[0])
