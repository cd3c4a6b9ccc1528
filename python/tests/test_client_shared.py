"""One APClient shared by threads, and the ids and arms it refuses.

The thread test runs in a child process, so that a crash of the library (an
abort on a reply freed twice, as one shared client did before its lock) is
this test's failure with the child's signal and last words rather than the
end of the whole pytest run. Its size: O3M_PY_THREAD_CALLS calls per thread
(default 1000: 8,000 calls, about 5 s, so that the CTest test
python_package stays within its time; 10,000 a thread, 80,000 calls, run by
hand: eval/bench/README.md)."""
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import o3m
from o3m._native import ffi, lib, new_err

THREADS = 8
CALLS = int(os.environ.get("O3M_PY_THREAD_CALLS", "1000"))

CHILD = textwrap.dedent("""
    import sys, threading, time
    import o3m
    conf, name, threads, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    c = o3m.APClient(config=conf, as_=name, deadline_ms=30000)
    items = [f"i{k}" for k in range(10)]
    before = c.stats()
    lock = threading.Lock()
    count = {"recommend": 0, "reward": 0, "stats": 0, "health": 0, "raised": 0}
    first = []

    def work(t):
        mine = dict.fromkeys(count, 0)
        decision = None
        for i in range(calls):
            try:
                if i % 4 in (0, 2):
                    rec = c.recommend(f"u{(t * 7 + i) % 20}", items[t % 5:t % 5 + 4])
                    assert rec.item in items and not rec.degraded, rec
                    decision = rec.decision
                    mine["recommend"] += 1
                elif i % 4 == 1 and decision is not None:
                    c.reward(decision, float(i % 2))
                    decision = None
                    mine["reward"] += 1
                elif i % 8 == 3:
                    assert c.stats().algo == "linucb"
                    mine["stats"] += 1
                else:
                    assert c.health()
                    mine["health"] += 1
            except o3m.O3MError as e:
                mine["raised"] += 1
                with lock:
                    first.append(str(e))
        with lock:
            for k in count:
                count[k] += mine[k]

    t0 = time.monotonic()
    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.monotonic() - t0
    after = c.stats()
    c.close()
    print(" ".join(f"{k}={v}" for k, v in count.items()),
          f"rounds={after.rounds - before.rounds} updates={after.updates - before.updates}",
          f"seconds={secs:.1f}", flush=True)
    if first:
        print("first error:", first[0], flush=True)
""")


def test_one_client_shared_by_8_threads(federation):
    """8 threads x CALLS calls (recommend, reward, stats, health) on one
    client: every call is answered or raises O3MError, the process lives,
    and the AP counted exactly the rounds and rewards that were answered."""
    conf, name = federation
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    r = subprocess.run([sys.executable, "-c", CHILD, conf, name, str(THREADS), str(CALLS)],
                       env=env, capture_output=True, text=True, timeout=3600)
    died = f"signal {signal.Signals(-r.returncode).name}" if r.returncode < 0 else \
        f"exit {r.returncode}"
    assert r.returncode == 0, (f"{THREADS} threads sharing one APClient: the process ended with "
                               f"{died}; stderr: {r.stderr[-600:]!r}")
    line = r.stdout.splitlines()[0]
    print(line)
    got = dict(kv.split("=") for kv in line.split())
    answered = sum(int(got[k]) for k in ("recommend", "reward", "stats", "health"))
    assert answered + int(got["raised"]) == THREADS * CALLS, r.stdout
    # Raised calls are failures a client handles (a deadline under load),
    # not the rule: at least 99 of 100 are answered.
    assert int(got["raised"]) * 100 <= THREADS * CALLS, r.stdout
    # Every answer was the AP's own: it counted each answered round and
    # reward once.
    assert int(got["rounds"]) == int(got["recommend"]), r.stdout
    assert int(got["updates"]) == int(got["reward"]), r.stdout


@pytest.fixture
def client():
    """A client that never connects: every refusal here comes before a call."""
    with o3m.APClient(insecure=True, target="127.0.0.1:1", deadline_ms=1000) as c:
        yield c


@pytest.mark.parametrize("user", [None, b"u1", 7, ["u1"]])
def test_user_that_is_not_a_str_raises_type_error(client, user):
    with pytest.raises(TypeError, match="user must be a str"):
        client.recommend(user, ["i1", "i2"])


@pytest.mark.parametrize("item", [None, b"i1", 3, 2.5])
def test_item_that_is_not_a_str_raises_type_error(client, item):
    with pytest.raises(TypeError, match=r"items\[1\] must be a str"):
        client.recommend("u1", ["i0", item])
    with pytest.raises(TypeError, match="items must be a sequence of str"):
        client.recommend("u1", "i0")


def test_nul_in_an_id_raises_value_error(client):
    with pytest.raises(ValueError, match="user 'u1\\\\x00x' holds a NUL"):
        client.recommend("u1\0x", ["i0", "i1"])
    with pytest.raises(ValueError, match=r"items\[0\] .* holds a NUL"):
        client.recommend("u1", ["i0\0", "i1"])


def test_longer_id_than_the_federation_limit_raises_value_error(client):
    assert o3m.client.MAX_ID == 128
    with pytest.raises(ValueError, match="user is 129 bytes of UTF-8, at most 128"):
        client.recommend("u" * 129, ["i0"])
    # Bytes, not characters: 43 three-byte characters are 129 bytes.
    with pytest.raises(ValueError, match=r"items\[0\] is 129 bytes"):
        client.recommend("u1", ["\u20ac" * 43])
    # The longest id passes the checks and reaches the call (which cannot
    # connect here).
    with pytest.raises(o3m.O3MError) as e:
        client.recommend("u" * 128, ["\u20ac" * 42])
    assert e.value.name in ("UNAVAILABLE", "DEADLINE"), e.value


@pytest.mark.parametrize("arms,exc,match", [
    ([0, -1], ValueError, r"arms\[1\] = -1 is not in 0\.\.999999"),
    (np.array([0, -1]), ValueError, r"arms\[1\] = -1"),
    ([0, 1000000], ValueError, r"arms\[1\] = 1000000"),
    ([0, 2**32], ValueError, r"arms\[1\] = 4294967296"),
    ([0, 1.0], TypeError, r"arms\[1\] must be an int, not float"),
    ([0, None], TypeError, r"arms\[1\] must be an int, not NoneType"),
    ([0, True], TypeError, r"arms\[1\] must be an int, not bool"),
    (np.array([0.0, 1.0]), TypeError, "arms must be integers"),
    ([0], ValueError, r"one arm per item \(2\), got 1"),
])
def test_bad_arms_raise(client, arms, exc, match):
    with pytest.raises(exc, match=match):
        client.recommend("u1", ["i0", "i1"], arms=arms)


def test_bad_decision_raises(client):
    with pytest.raises(ValueError, match="decision -1 is not in"):
        client.reward(-1, 1.0)
    with pytest.raises(TypeError, match="decision must be an int"):
        client.reward("7", 1.0)


def test_a_closed_client_raises(client):
    client.close()
    with pytest.raises(ValueError, match="closed"):
        client.stats()


def test_the_c_api_refuses_what_python_refuses():
    """o3m_ap_client_recommend itself refuses an arm of 2^32-1 (a -1 of a
    signed caller), an id longer than O3M_API_MAX_ID and a NULL item,
    before it sends anything."""
    out = ffi.new("o3m_ap_client **")
    err = new_err()
    opts = [ffi.new("char[]", s) for s in (b"insecure", b"target=127.0.0.1:1",
                                           b"deadline-ms=1000")]
    assert lib.o3m_ap_client_open(out, ffi.new("char *[]", opts + [ffi.NULL]), err) == 0
    c = out[0]
    try:
        keep = [ffi.new("char[]", b"i0"), ffi.new("char[]", b"i1")]
        items = ffi.new("char *[]", keep)
        rec = ffi.new("o3m_recommendation *")
        arms = ffi.new("uint32_t[]", [0, 2**32 - 1])

        def refused(user, items_, arms_):
            e = new_err()
            rc = lib.o3m_ap_client_recommend(c, user, 2, items_, arms_, ffi.NULL, 0, rec, e)
            return ffi.string(lib.o3m_errname(rc)).decode(), \
                ffi.string(lib.o3m_err_message(e)).decode()

        assert refused(b"u1", items, arms) == \
            ("INVAL", "recommend: arms[1] = 4294967295 is not in 0..999999")
        assert refused(b"u" * 129, items, ffi.NULL) == \
            ("INVAL", "recommend: user is longer than 128 bytes")
        holey = ffi.new("char *[]", [keep[0], ffi.NULL])
        assert refused(b"u1", holey, ffi.NULL) == ("INVAL", "recommend: items[1] is NULL")
    finally:
        lib.o3m_ap_client_close(c)
