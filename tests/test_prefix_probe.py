"""Recovery from a failed prefix: the replay reaches the recorded state, the agent plays on."""

from __future__ import annotations

import pytest

from budget_envs.eval.metrics import damage_bin, prefix_table, wilson_interval
from budget_envs.eval.runner import EvalPlan, load_records, run_plan
from budget_envs.eval.runner.prefix import prefix_jobs, prefix_probe


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("prefix-run")
    plan = EvalPlan(
        env_ids=["BudgetMix/ToolUse-v0"],
        agents={"eps": "oracle:epsilon=0.6", "random": "random"},
        tasks=3,
        samples=2,
        budgets=[8],
        fault_turns=[2],
        fault_kinds=("tool_error", "stale_read", "tool_down"),
        env_kwargs={"level": 2},
    )
    run_plan(plan, run_dir)
    return load_records(run_dir)


def test_episode_records_keep_actions_digests_costs_and_stop_reason(failed_run):
    eps = [r for r in failed_run if r["record"] == "episode"]
    assert eps
    for r in eps:
        assert len(r["actions"]) == len(r["obs_digests"]) == len(r["costs"]) == r["turns"]
        assert len(r["state_hashes"]) == r["turns"] and all(r["state_hashes"])
        assert r["stop_reason"] in ("won", "lost", "budget")
        assert (r["stop_reason"] == "won") == r["won"]


def test_the_replayed_prefix_reaches_the_recorded_state_and_the_agent_plays_on(failed_run):
    jobs = prefix_jobs(failed_run, [1, 3])
    assert jobs, "the plan is meant to produce failed episodes"
    out = prefix_probe(failed_run, {"oracle": "oracle"}, [1, 3], env_kwargs={"level": 2})
    assert len(out) == len(jobs)
    assert all(p.error is None for p in out)
    # Same seed, same task, same budget, same faults: every replay lands on the recorded state.
    assert all(p.reached for p in out)
    for p, (rec, t) in zip(out, jobs):
        assert p.prefix_turns == t and p.source == rec["agent"]
        assert p.state_hash is not None and p.state_hash == rec["state_hashes"][t - 1]
        assert p.source_key == rec["key"]
        assert p.turns <= rec["budget"]
        assert p.stop_reason in ("won", "lost", "budget")
        assert p.won == (p.stop_reason == "won")
        if p.won:
            # The oracle wins within the budget exactly when the prefix left enough turns.
            assert p.first_success_turn <= rec["budget"]
    rows = prefix_table([vars(p) for p in out])
    assert rows and all(r.low <= r.success <= r.high for r in rows)
    assert {r.prefix_turns for r in rows} <= {1, 3}


def test_a_tampered_prefix_does_not_count_as_reached(failed_run):
    rec, t = prefix_jobs(failed_run, [3])[0]
    bad = dict(rec)
    bad["obs_digests"] = ["0" * 16] * len(rec["obs_digests"])
    (probe,) = prefix_probe([bad], {"oracle": "oracle"}, [t], env_kwargs={"level": 2})
    assert not probe.reached and not probe.won
    assert prefix_table([vars(probe)]) == []
    # A state hash that differs at turn t is not the recorded state either.
    bad = dict(rec)
    bad["state_hashes"] = ["f" * 32] * len(rec["state_hashes"])
    (probe,) = prefix_probe([bad], {"oracle": "oracle"}, [t], env_kwargs={"level": 2})
    assert not probe.reached and probe.state_hash == rec["state_hashes"][t - 1]


def test_intervals_and_bins():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(5, 10)
    assert low < 0.5 < high
    assert [damage_bin(d) for d in (0, 2, 4, 9, 10**6)] == ["0", "1-2", "3-5", "6+", "lost"]
    with pytest.raises(ValueError, match="'nope'"):
        prefix_table([], by="nope")
