"""The AP client from Python against the real daemons (a federation that
tests/with-federation.sh started): recommend, reward, stats and health, the
TLS options o3m-cli has, and the errors the active participant sends."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import o3m

ITEMS = [f"i{k}" for k in range(10)]


def test_recommend_reward_stats(federation):
    conf, name = federation
    with o3m.APClient(config=conf, as_=name) as c:
        assert c.health()
        before = c.stats()
        assert (before.algo, before.model) == ("linucb", "shared")
        # A client is answered its own counters (SECURITY.md, "Stats by who asks").
        assert before.per_client and before.client == name
        for t in range(5):
            rec = c.recommend(f"u{t}", ITEMS[:4])
            assert 0 <= rec.candidate < 4 and rec.item == ITEMS[rec.candidate]
            assert np.isfinite(rec.score) and rec.mask_id != 0
            # Every party is up: federated, not the AP's local model.
            assert not rec.degraded and rec.missing == ()
            assert c.reward(rec.decision, 1.0) == before.updates + t + 1
        after = c.stats()
        assert after.rounds == before.rounds + 5
        assert after.updates == before.updates + 5
        assert after.theta_norm > 0
        with pytest.raises(o3m.O3MError) as e:
            c.reward(rec.decision, 1.0)  # a decision is rewarded once
        assert e.value.name == "EXISTS" and "already rewarded" in e.value.message
        with pytest.raises(o3m.O3MError) as e:
            c.recommend("u1", [])
        assert e.value.name == "INVAL" and "0 candidates" in e.value.message
        with pytest.raises(o3m.O3MError) as e:
            c.reward(2**64 - 1, 1.0)
        assert e.value.name == "NOTFOUND"
        assert c.stats().updates == before.updates + 5


def test_explicit_cert_key_ca_as_o3m_cli(federation):
    conf, name = federation
    certs = Path(conf).parent / "certs"
    with o3m.APClient(config=conf, cert=str(certs / f"{name}.pem"),
                      key=str(certs / f"{name}.key"), ca=str(certs / "ca.pem"),
                      deadline_ms=10000) as c:
        assert c.recommend("u1", ITEMS).item in ITEMS


def test_identities_the_ap_refuses(federation):
    conf, _ = federation
    # A party's certificate gets the health check but not Recommend.
    with o3m.APClient(config=conf, as_="bank") as c:
        assert c.health()
        with pytest.raises(o3m.O3MError) as e:
            c.recommend("u1", ITEMS)
        assert e.value.name == "PERM"
    with pytest.raises(o3m.O3MError) as e:
        o3m.APClient(config=conf, as_="nobody")
    assert e.value.name == "INVAL" and "nobody" in e.value.message
    # Plaintext against the mutual-TLS server: no connection.
    with o3m.APClient(config=conf, insecure=True, deadline_ms=2000) as c:
        with pytest.raises(o3m.O3MError) as e:
            c.recommend("u1", ITEMS)
        assert e.value.name in ("UNAVAILABLE", "DEADLINE")


def test_option_combinations_as_o3m_cli():
    with pytest.raises(o3m.O3MError, match="--as needs --config"):
        o3m.APClient(as_="client", target="127.0.0.1:1")
    with pytest.raises(o3m.O3MError, match="--cert and --key go together"):
        o3m.APClient(cert="c.pem", target="127.0.0.1:1")
    with pytest.raises(o3m.O3MError, match="give --as NAME"):
        o3m.APClient(target="127.0.0.1:1")
    # Without a config, TLS needs the AP's party name, or any
    # party's trial certificate (it names 127.0.0.1) would pass for the AP's.
    with pytest.raises(o3m.O3MError, match="give --server-name NAME") as e:
        o3m.APClient(cert="c.pem", key="c.key", ca="ca.pem", target="127.0.0.1:1")
    assert e.value.name == "INVAL"
    with pytest.raises(o3m.O3MError) as e:
        o3m.APClient(config="/nonexistent/federation.conf", as_="client")
    assert "/nonexistent/federation.conf" in e.value.message


def test_readme_example_is_the_tested_file_and_runs(federation):
    """The Python loop of docs/library.md is examples/recommend_loop.py, verbatim."""
    root = Path(__file__).resolve().parents[2]
    example = (root / "python" / "examples" / "recommend_loop.py").read_text()
    page = (root / "docs" / "library.md").read_text()
    assert "```python\n" + example + "```" in page
    conf, name = federation
    with o3m.APClient(config=conf, as_=name) as c:
        before = c.stats()
    env = dict(os.environ, PYTHONPATH=str(root / "python"))
    out = subprocess.run([sys.executable, str(root / "python" / "examples" /
                                              "recommend_loop.py"), "--config", conf, "--as", name],
                         env=env, check=True, capture_output=True, text=True).stdout
    assert out.startswith("clicks=") and "Stats(rounds=" in out and "algo='linucb'" in out
    # The loop rewards what it was recommended: some of its 40 rewards are
    # clicks, so they reach the model (a loop rewarding items it was never
    # recommended ended with theta_norm=0.0 on a fresh federation).
    clicks = int(out.split()[0].split("=")[1])
    assert 0 < clicks <= 40, out
    with o3m.APClient(config=conf, as_=name) as c:
        after = c.stats()
    assert after.updates == before.updates + 40
    assert after.theta_norm > 0 and after.theta_norm != before.theta_norm, (before, after)


def test_readme_example_defaults_are_the_quickstarts(tmp_path):
    """Without options the example calls as the README quickstart's client,
    [client frontend] of fed.conf; where there is no fed.conf it says so in
    one line, not a traceback."""
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    assert "[client frontend]" in readme and "--config fed.conf --as frontend" in readme
    example = str(root / "python" / "examples" / "recommend_loop.py")
    env = dict(os.environ, PYTHONPATH=str(root / "python"))
    env.pop("O3M_FED_CONF", None)
    usage = subprocess.run([sys.executable, example, "--help"], env=env, check=True,
                           capture_output=True, text=True).stdout
    assert "default: fed.conf" in usage and "default: frontend" in usage, usage
    r = subprocess.run([sys.executable, example], env=env, cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("recommend_loop: ") and "fed.conf" in r.stderr, r.stderr
