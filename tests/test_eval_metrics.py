"""Pass@(K,T) against exact rational arithmetic, its shape properties, bootstrap and derivation."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest

from budget_envs.eval.metrics import (
    DerivationError,
    bootstrap_pass_at_kt,
    first_success_matrix,
    miss_ratio_table,
    pass_at_kt,
    pass_at_kt_per_task,
    recovery_table,
    single_step_accuracy,
)


def exact_pass(fs: np.ndarray, k: int, t: int) -> Fraction:
    """1 - C(n - c_T, K) / C(n, K) per task, averaged, in exact rationals."""
    total = Fraction(0)
    for row in fs:
        present = [int(v) for v in row if v >= 0]
        n = len(present)
        c = sum(1 for v in present if 1 <= v <= t)
        total += 1 - Fraction(comb(n - c, k), comb(n, k))
    return total / len(fs)


@pytest.mark.parametrize("seed", range(8))
def test_matches_fractions_on_random_data(seed):
    rng = np.random.default_rng(seed)
    tasks, n = int(rng.integers(1, 12)), int(rng.integers(1, 20))
    fs = rng.integers(0, 15, size=(tasks, n))
    fs[rng.random(fs.shape) < 0.3] = 0
    ks = list(range(1, n + 1))
    ts = [0, 1, 2, 5, 9, 14, 30]
    got = pass_at_kt(fs, ks, ts)
    assert got.shape == (len(ks), len(ts))
    for i, k in enumerate(ks):
        for j, t in enumerate(ts):
            assert got[i, j] == pytest.approx(float(exact_pass(fs, k, t)), abs=1e-12)


def test_missing_samples_use_each_tasks_own_n():
    fs = np.array([[3, 0, -1, -1], [1, 2, 0, 5]])
    got = pass_at_kt(fs, [1, 2], [2, 5])
    for i, k in enumerate([1, 2]):
        for j, t in enumerate([2, 5]):
            assert got[i, j] == pytest.approx(float(exact_pass(fs, k, t)), abs=1e-12)
    with pytest.raises(ValueError, match="K=3"):
        pass_at_kt(fs, [3], [2])


def test_large_n_is_stable_and_exact():
    rng = np.random.default_rng(1)
    n = 400
    fs = rng.integers(0, 50, size=(3, n))
    for k in (1, 7, 200, 399, 400):
        got = pass_at_kt(fs, [k], [10, 30])
        for j, t in enumerate([10, 30]):
            assert got[0, j] == pytest.approx(float(exact_pass(fs, k, t)), abs=1e-12)
    assert np.all(np.isfinite(miss_ratio_table(n, n)))


@pytest.mark.parametrize("bad", [[0], [5], [-1], [1, 5]])
def test_k_out_of_range_raises(bad):
    with pytest.raises(ValueError, match="K"):
        pass_at_kt(np.ones((2, 4), dtype=int), bad, [3])


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        pass_at_kt(np.ones(4, dtype=int), [1], [1])
    with pytest.raises(TypeError):
        pass_at_kt(np.ones((2, 2)) * 0.5, [1], [1])
    with pytest.raises(ValueError):
        pass_at_kt(np.full((2, 2), -3), [1], [1])


@pytest.mark.parametrize("seed", range(5))
def test_monotone_in_k_and_t(seed):
    rng = np.random.default_rng(100 + seed)
    fs = rng.integers(0, 40, size=(30, 16))
    surface = pass_at_kt(fs, range(1, 17), range(0, 41))
    assert np.all(np.diff(surface, axis=0) >= -1e-12)
    assert np.all(np.diff(surface, axis=1) >= -1e-12)
    assert np.all((surface >= 0) & (surface <= 1))
    # K = n is "any sample within T"; K = 1 is the mean success rate.
    assert np.allclose(
        surface[-1], [np.mean(np.any((fs >= 1) & (fs <= t), axis=1)) for t in range(0, 41)]
    )
    assert np.allclose(surface[0], [np.mean((fs >= 1) & (fs <= t)) for t in range(0, 41)])


def test_per_task_averages_to_surface():
    rng = np.random.default_rng(3)
    fs = rng.integers(0, 9, size=(12, 6))
    fs[0, :2] = -1
    per = pass_at_kt_per_task(fs, [1, 2, 4], [1, 4, 8])
    assert per.shape == (12, 3, 3)
    assert np.allclose(per.mean(axis=0), pass_at_kt(fs, [1, 2, 4], [1, 4, 8]))


def test_bootstrap_is_seeded_and_brackets_the_mean():
    rng = np.random.default_rng(4)
    fs = rng.integers(0, 12, size=(40, 8))
    a = bootstrap_pass_at_kt(fs, [1, 8], [4, 12], n_boot=500, seed=7)
    b = bootstrap_pass_at_kt(fs, [1, 8], [4, 12], n_boot=500, seed=7)
    c = bootstrap_pass_at_kt(fs, [1, 8], [4, 12], n_boot=500, seed=8)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
    assert not np.array_equal(a[1], c[1])
    mean, low, high = a
    assert np.allclose(mean, pass_at_kt(fs, [1, 8], [4, 12]))
    assert np.all(low <= mean + 1e-12) and np.all(mean <= high + 1e-12)
    assert np.all(high[0] - low[0] > 0)  # K=1 varies over tasks; K=8 at T=12 is 1 everywhere
    with pytest.raises(ValueError):
        bootstrap_pass_at_kt(fs, [1], [4], n_boot=0)


def _rec(task, sample, budget, fs, visibility="hidden", **kw):
    return {
        "task_id": task,
        "sample": sample,
        "budget": budget,
        "visibility": visibility,
        "first_success_turn": fs,
        "won": fs is not None,
        "record": "episode",
        **kw,
    }


def test_hidden_records_derive_every_smaller_budget():
    recs = [_rec("a", 0, 20, 5), _rec("a", 1, 20, None), _rec("b", 0, 20, 12), _rec("b", 1, 20, 3)]
    ids, m10 = first_success_matrix(recs, 10)
    assert ids == ["a", "b"] and m10.tolist() == [[5, 0], [0, 3]]
    _, m20 = first_success_matrix(recs, 20)
    assert m20.tolist() == [[5, 0], [12, 3]]
    with pytest.raises(DerivationError):
        first_success_matrix(recs, 21)


def test_visible_records_refuse_a_smaller_budget():
    recs = [_rec("a", 0, 20, 5, "remaining"), _rec("a", 1, 20, None, "remaining")]
    assert first_success_matrix(recs, 20)[1].tolist() == [[5, 0]]
    with pytest.raises(DerivationError, match="cannot be derived"):
        first_success_matrix(recs, 10)
    # With a separate visible run at T=10, that run (and only it) answers T=10.
    recs += [_rec("a", 0, 10, None, "remaining"), _rec("a", 1, 10, 9, "remaining")]
    assert first_success_matrix(recs, 10)[1].tolist() == [[0, 9]]


def test_errored_records_are_missing_not_failures():
    recs = [_rec("a", 0, 10, 4), _rec("a", 1, 10, None, error="AgentError: boom")]
    assert first_success_matrix(recs, 10)[1].tolist() == [[4, -1]]


def test_single_step_and_recovery_tables():
    recs = [
        _rec("a", 0, 10, 4, oracle_agreement=[True, False, True, None], fault_turn=None),
        _rec(
            "a",
            0,
            10,
            6,
            oracle_agreement=[True],
            fault_turn=2,
            faults=[{"turn": 2, "cost_before": 3, "cost_after": 5}],
        ),
        _rec(
            "a",
            1,
            10,
            None,
            fault_turn=2,
            faults=[{"turn": 2, "cost_before": 3, "cost_after": 10**6}],
        ),
        {"record": "probe", "correct": True, "progress": True},
        {"record": "probe", "correct": False, "progress": True},
    ]
    acc = single_step_accuracy(recs)
    assert acc["on_policy"] == pytest.approx(3 / 4) and acc["on_policy_turns"] == 4
    assert acc["prefix"] == 0.5 and acc["prefix_progress"] == 1.0 and acc["prefix_states"] == 2
    (row,) = recovery_table(recs)
    assert (row.fault_turn, row.budget, row.episodes) == (2, 10, 2)
    assert row.success == 0.5 and row.baseline_success == 1.0
    assert row.damage == 2 and row.unrecoverable == 1 and row.extra_turns == 2 and row.fired == 1.0
