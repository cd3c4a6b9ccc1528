"""The engine from Python: decisions equal o3m-eval's (the C engine) on the
same stream, scores, state round trip, refused input."""
import csv
import subprocess

import numpy as np
import pytest

import o3m

D, K, T = 6, 5, 300


def read_stream(path):
    """(contexts T x K x d, rewards T x K) of an o3m-eval stream file."""
    with open(path) as f:
        rows = list(csv.reader(f))[1:]
    data = np.array(rows, dtype=np.float64).reshape(T, K, 3 + D)
    return data[:, :, 3:], data[:, :, 2]


@pytest.mark.parametrize("algo,model", [("linucb", "shared"), ("lints", "shared"),
                                        ("linucb", "disjoint"), ("lints", "disjoint")])
def test_decisions_equal_o3m_eval(tmp_path, o3m_eval, algo, model):
    stream = tmp_path / "stream.csv"
    subprocess.run([o3m_eval, "gen-synthetic", "--d", str(D), "--K", str(K), "--T", str(T),
                    "--seed", "3", "--out", str(stream)], check=True)
    out = subprocess.run([o3m_eval, "simulate", "--algo", algo, "--model", model, "--alpha",
                          "0.5", "--v", "0.1", "--seed", "7", str(stream)], check=True,
                         capture_output=True, text=True).stdout.split()
    assert out[0] == "round,arm"
    c_arms = [int(line.split(",")[1]) for line in out[1:]]
    X, R = read_stream(stream)
    g = o3m.Engine(D, algo=algo, model=model, n_arms=K, alpha=0.5, v=0.1, seed=7,
                   max_candidates=K)
    py_arms = []
    for t in range(T):
        k, score = g.choose(X[t])
        assert np.isfinite(score)
        g.update(X[t, k], R[t, k], arm=k)
        py_arms.append(k)
    assert len(c_arms) == T
    assert py_arms == c_arms
    assert g.updates == T
    # Not a constant policy: the comparison means something.
    assert len(set(py_arms)) > 1


def test_linucb_score_is_mean_plus_alpha_width():
    rng = np.random.default_rng(1)
    g = o3m.Engine(4, alpha=0.7)
    for _ in range(50):
        x = rng.normal(size=4)
        g.update(x, float(x[0] - x[2]))
    X = rng.normal(size=(6, 4))
    k, score = g.choose(X)
    mean, var = g.scores(X)
    ucb = mean + 0.7 * np.sqrt(var)
    assert k == int(np.argmax(ucb))
    assert score == pytest.approx(ucb[k], rel=1e-12)
    assert g.theta() @ X[k] == pytest.approx(mean[k], rel=1e-12)


def test_state_round_trip_decides_alike():
    rng = np.random.default_rng(2)
    a = o3m.Engine(3, algo="lints", seed=5)
    for _ in range(20):
        a.update(rng.normal(size=3), 1.0)
    b = o3m.Engine(3, algo="lints", seed=99)
    b.load_state(a.state())
    assert b.state() == a.state()
    for _ in range(10):
        X = rng.normal(size=(4, 3))
        assert a.choose(X) == b.choose(X)
    with pytest.raises(o3m.O3MError) as e:
        o3m.Engine(4, algo="lints").load_state(a.state())
    assert e.value.name == "DIM"


def test_bad_input_is_refused_and_changes_nothing():
    g = o3m.Engine(3, max_candidates=4)
    g.update([1.0, 0.0, 0.0], 1.0)
    before = g.state()
    with pytest.raises(o3m.O3MError) as e:
        g.update([np.nan, 0.0, 0.0], 1.0)
    assert e.value.name == "NONFINITE" and e.value.code < 0
    with pytest.raises(o3m.O3MError) as e:
        g.update([1.0, 0.0, 0.0], np.inf)
    assert e.value.name == "NONFINITE"
    with pytest.raises(o3m.O3MError) as e:
        g.choose(np.ones((5, 3)))  # K above max_candidates
    assert e.value.name == "INVAL" and "K = 5 candidates, expected 1..4" in e.value.message
    with pytest.raises(ValueError, match="K x 3"):
        g.choose(np.ones((2, 4)))
    with pytest.raises(ValueError, match="3 values"):
        g.update([1.0, 2.0], 0.0)
    assert g.state() == before
    assert g.updates == 1


@pytest.mark.parametrize("kwargs,phrase", [({"algo": "ucb"}, "algo"),
                                           ({"model": "disjoint"}, "n_arms"),
                                           ({"lam": 0.0}, "lambda"),
                                           ({"alpha": float("nan")}, "alpha")])
def test_bad_options_name_the_option(kwargs, phrase):
    with pytest.raises(o3m.O3MError) as e:
        o3m.Engine(3, **kwargs)
    assert e.value.name == "INVAL"
    assert phrase in e.value.message
