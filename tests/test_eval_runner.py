"""The runner on the toy env: derivation, oracle ground truth, parallel back ends, resume."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from budget_envs.registry import registered_ids
from contract_helpers import TOY_ID, make

from budget_envs.errors import PlanMismatch
from budget_envs.eval.agents import OracleAgent
from budget_envs.eval.metrics import (
    DerivationError,
    first_success_matrix,
    pass_at_kt,
    pass_at_kt_per_task,
)
from budget_envs.eval.runner import (
    EpisodeJob,
    EvalPlan,
    load_records,
    plan_jobs,
    run_episode,
    run_plan,
    transcript,
)

TESTS = Path(__file__).resolve().parent
AGENTS = {"random": "random", "oracle": "oracle", "eps": "oracle:epsilon=0.3"}


def _strip(records):
    return sorted(
        json.dumps({k: v for k, v in r.items() if k != "wall_time"}, sort_keys=True)
        for r in records
    )


def _optimal_lengths(task_indices):
    env = make(TOY_ID, budget=None)
    out = {}
    for i in task_indices:
        _, info = env.reset(seed=0, options={"task_id": i})
        out[info["task_id"]] = env.unwrapped.cost_to_go()
    return out


def test_plan_expands_hidden_once_and_visible_per_budget():
    hidden = plan_jobs(
        EvalPlan(env_ids=[TOY_ID], agents={"r": "random"}, tasks=2, samples=3, budgets=[4, 8, 12])
    )
    assert {j.budget for j in hidden} == {12} and len(hidden) == 6
    visible = plan_jobs(
        EvalPlan(
            env_ids=[TOY_ID],
            agents={"r": "random"},
            tasks=2,
            samples=3,
            budgets=[4, 8, 12],
            visibility="remaining",
            fault_turns=[2],
            probe_states=2,
        )
    )
    episodes = [j for j in visible if isinstance(j, EpisodeJob)]
    assert sorted({j.budget for j in episodes if j.fault_turn is None}) == [4, 8, 12]
    assert {j.budget for j in episodes if j.fault_turn == 2} == {12}
    assert len(visible) == 2 * 3 * 3 + 2 * 3 + 2 * 2
    # Seeds depend on task and sample only: budgets and faults are paired.
    seeds = {(j.task_index, j.sample): j.seed for j in episodes}
    assert all(seeds[(j.task_index, j.sample)] == j.seed for j in episodes)
    with pytest.raises(ValueError):
        EvalPlan(env_ids=[TOY_ID], agents={}, tasks=1)
    with pytest.raises(ValueError):
        EvalPlan(env_ids=[TOY_ID], agents={"r": "random"}, samples=0)


def test_single_run_derivation_equals_separate_capped_runs(tmp_path):
    agents = {"random": "random", "eps": "oracle:epsilon=0.4"}
    common = dict(env_ids=[TOY_ID], agents=agents, tasks=6, samples=5, seed=3, fault_turns=[2])
    run_plan(EvalPlan(budgets=[14], **common), tmp_path / "full")
    full = load_records(tmp_path / "full")
    for t in (3, 6, 8, 10, 13):
        run_plan(EvalPlan(budgets=[t], **{**common, "fault_turns": []}), tmp_path / f"cap{t}")
        capped = load_records(tmp_path / f"cap{t}")
        for agent in agents:
            mine = [r for r in full if r["agent"] == agent and r["fault_turn"] is None]
            cap = [r for r in capped if r["agent"] == agent]
            ids_a, derived = first_success_matrix(mine, t)
            ids_b, direct = first_success_matrix(cap, t)
            assert ids_a == ids_b
            assert np.array_equal(derived, direct), (agent, t)
            ks = list(range(1, 6))
            assert np.allclose(pass_at_kt(derived, ks, [t]), pass_at_kt(direct, ks, [t]))
            # and every capped episode is the prefix of the full one
            by_key = {(r["task_id"], r["sample"]): r for r in mine}
            for r in cap:
                f = by_key[(r["task_id"], r["sample"])]
                assert r["turns"] == min(t, f["turns"])
                assert r["oracle_agreement"] == f["oracle_agreement"][: r["turns"]]


def test_oracle_eps0_passes_at_every_budget_from_the_optimal_length(tmp_path):
    run_plan(
        EvalPlan(env_ids=[TOY_ID], agents={"oracle": "oracle"}, tasks=10, samples=2, budgets=[16]),
        tmp_path / "o",
    )
    recs = load_records(tmp_path / "o")
    lengths = _optimal_lengths(range(10))
    ids, fs = first_success_matrix(recs, 16)
    ts = list(range(1, 17))
    per_task = pass_at_kt_per_task(fs, [1], ts)[:, 0, :]
    for i, task in enumerate(ids):
        expected = [1.0 if t >= lengths[task] else 0.0 for t in ts]
        assert per_task[i].tolist() == expected, task
    assert all(all(r["oracle_agreement"]) for r in recs)
    surface = pass_at_kt(fs, [1, 2], ts)
    assert surface[0, max(lengths.values()) - 1] == 1.0


def test_visible_runs_cannot_be_derived(tmp_path):
    run_plan(
        EvalPlan(
            env_ids=[TOY_ID],
            agents={"o": "oracle"},
            tasks=2,
            samples=2,
            budgets=[6, 12],
            visibility="remaining",
        ),
        tmp_path / "v",
    )
    recs = load_records(tmp_path / "v")
    assert {r["budget"] for r in recs} == {6, 12}
    assert first_success_matrix(recs, 6)[1].shape == (2, 2)
    with pytest.raises(DerivationError):
        first_success_matrix(recs, 9)


def test_probes_use_oracle_prefix_states(tmp_path):
    run_plan(
        EvalPlan(env_ids=[TOY_ID], agents=AGENTS, tasks=3, samples=1, budgets=[12], probe_states=3),
        tmp_path / "p",
    )
    probes = [r for r in load_records(tmp_path / "p") if r["record"] == "probe"]
    assert len(probes) == 3 * 3 * 3
    oracle = [p for p in probes if p["agent"] == "oracle"]
    assert all(p["correct"] and p["progress"] for p in oracle)
    assert [p["prefix_turns"] for p in oracle[:3]] == [0, 1, 2]
    assert all(p["cost_before"] is not None for p in probes)
    # the cost before the t-th probe falls by one per oracle turn
    costs = [p["cost_before"] for p in oracle[:3]]
    assert costs[0] - costs[1] == 1 and costs[1] - costs[2] == 1


def test_fault_runs_record_the_fault(tmp_path):
    run_plan(
        EvalPlan(
            env_ids=[TOY_ID],
            agents={"oracle": "oracle"},
            tasks=4,
            samples=2,
            budgets=[12],
            fault_turns=[1, 3],
            fault_kinds=("drop",),
        ),
        tmp_path / "f",
    )
    recs = [r for r in load_records(tmp_path / "f") if r["fault_turn"]]
    assert recs and all(
        len(r["faults"]) == 1 and r["faults"][0]["turn"] == r["fault_turn"] for r in recs
    )
    # a dropped turn costs the oracle exactly one turn
    base = {
        (r["task_id"], r["sample"]): r
        for r in load_records(tmp_path / "f")
        if r["fault_turn"] is None
    }
    both_won = [(r, base[(r["task_id"], r["sample"])]) for r in recs]
    both_won = [(r, b) for r, b in both_won if r["won"] and b["won"]]
    assert both_won, "no episode won both with and without the fault"
    for r, b in both_won:
        assert r["first_success_turn"] == b["first_success_turn"] + 1


def test_process_workers_give_identical_records(tmp_path):
    plan = EvalPlan(
        env_ids=[TOY_ID],
        agents=AGENTS,
        tasks=5,
        samples=3,
        budgets=[12],
        fault_turns=[2],
        probe_states=2,
    )
    run_plan(plan, tmp_path / "one")
    run_plan(plan, tmp_path / "two", workers=2)
    a, b = load_records(tmp_path / "one"), load_records(tmp_path / "two")
    assert len(a) == len(plan_jobs(plan))
    assert _strip(a) == _strip(b)


def test_ray_and_local_runners_give_identical_records(tmp_path):
    import ray
    import toy_env

    # The toy env lives in the tests folder, which Ray workers cannot import: ship it by value.
    ray.cloudpickle.register_pickle_by_value(toy_env)
    plan = EvalPlan(
        env_ids=[TOY_ID],
        agents=AGENTS,
        tasks=4,
        samples=3,
        budgets=[12],
        fault_turns=[2],
        probe_states=2,
    )
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        run_plan(plan, tmp_path / "ray", ray="auto", chunk=5)
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(toy_env)
    run_plan(plan, tmp_path / "local")
    a, b = load_records(tmp_path / "local"), load_records(tmp_path / "ray")
    assert len(b) == len(plan_jobs(plan))
    assert _strip(a) == _strip(b)


def test_existing_run_needs_resume(tmp_path):
    plan = EvalPlan(env_ids=[TOY_ID], agents={"o": "oracle"}, tasks=2, samples=2, budgets=[12])
    run_plan(plan, tmp_path / "r")
    with pytest.raises(FileExistsError, match="resume"):
        run_plan(plan, tmp_path / "r")
    again = run_plan(plan, tmp_path / "r", resume=True)
    assert again.ran == 0 and again.skipped == 4


def test_resume_refuses_another_plan_and_keeps_the_config(tmp_path):
    plan = EvalPlan(env_ids=[TOY_ID], agents={"o": "oracle"}, tasks=2, samples=2, budgets=[12])
    run_plan(plan, tmp_path / "r")
    config = (tmp_path / "r" / "config.json").read_bytes()
    other = EvalPlan(env_ids=[TOY_ID], agents={"o": "random"}, tasks=2, samples=3, budgets=[12])
    with pytest.raises(PlanMismatch) as info:
        run_plan(other, tmp_path / "r", resume=True)
    assert info.value.differences == [
        ("agents", {"o": "oracle"}, {"o": "random"}),
        ("samples", 2, 3),
    ]
    assert (tmp_path / "r" / "config.json").read_bytes() == config
    assert len(load_records(tmp_path / "r")) == 4


def test_torn_config_is_rewritten_when_every_record_is_a_job_of_the_plan(tmp_path):
    # random fails the toy tasks at T=3, so prefix probes run too (their records count)
    plan = EvalPlan(
        env_ids=[TOY_ID], agents={"r": "random"}, tasks=2, samples=2, budgets=[3], prefix_turns=[1]
    )
    first = run_plan(plan, tmp_path / "r")
    assert first.prefix_total > 0
    config_path = tmp_path / "r" / "config.json"
    config = config_path.read_bytes()
    config_path.write_bytes(config[: len(config) // 2])
    with pytest.raises(PlanMismatch, match="cannot be known"):
        run_plan(dataclasses.replace(plan, seed=1), tmp_path / "r", resume=True)
    again = run_plan(plan, tmp_path / "r", resume=True)
    assert again.ran == 0 and again.skipped == first.total
    assert config_path.read_bytes() == config


_KILLED_RUN = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    import budget_envs
    from contract_helpers import register_toy, TOY_ID
    register_toy()
    from budget_envs.eval.agents import OracleAgent
    from budget_envs.eval.runner import EvalPlan, run_plan

    class SlowOracle(OracleAgent):
        def act(self, observation, info):
            time.sleep({delay})
            return super().act(observation, info)

    plan = EvalPlan(env_ids=[TOY_ID], agents={{"slow": SlowOracle(epsilon=0.3, seed=1)}}, tasks=6, samples=3,
                    budgets=[12], seed=5)
    run_plan(plan, sys.argv[1], resume=True, workers=int(sys.argv[2]))
    """
)


@pytest.mark.parametrize("workers", [1, 2])
def test_resume_after_a_killed_run(tmp_path, workers):
    script = tmp_path / "run.py"
    script.write_text(_KILLED_RUN.format(tests=str(TESTS), delay=0.01))
    run = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(run), str(workers)], start_new_session=True
    )
    records = run / "records.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline:
        if records.exists() and records.read_text().count("\n") >= 4:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = load_records(run)
    assert 4 <= len(before) < 18, "the run should have been killed mid-way"
    # a torn half line, as a kill during a write would leave
    with open(records, "a") as fh:
        fh.write('{"env_id": "BudgetMixTest/To')
    subprocess.run([sys.executable, str(script), str(run), str(workers)], check=True, timeout=120)
    after = load_records(run)
    assert len(after) == 18
    assert len({r["key"] for r in after}) == 18
    assert all(json.dumps(r) in records.read_text() for r in before)
    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, str(script), str(fresh), "1"], check=True, timeout=120)
    assert _strip(after) == _strip(load_records(fresh))


class _Broken:
    name = "broken"

    def reset(self, *, env_id, observation, info, seed):
        self.n = 0

    def act(self, observation, info):
        self.n += 1
        if self.n == 3:
            raise RuntimeError("endpoint exploded")
        return info["admissible_actions"][0]


def test_agent_failures_are_errors_not_failures(tmp_path):
    plan = EvalPlan(
        env_ids=[TOY_ID], agents={"broken": _Broken()}, tasks=2, samples=2, budgets=[12]
    )
    result = run_plan(plan, tmp_path / "b")
    assert result.errors == 4
    recs = load_records(tmp_path / "b")
    assert all(
        r["error"].startswith("RuntimeError") and r["won"] is False and r["turns"] == 2
        for r in recs
    )
    # errors are retried on resume
    again = run_plan(plan, tmp_path / "b", resume=True)
    assert again.skipped == 0 and again.ran == 4


def test_budget_is_hidden_from_agents_unless_shown():
    seen = []

    class Spy:
        name = "spy"

        def reset(self, *, env_id, observation, info, seed):
            seen.append(dict(info))

        def act(self, observation, info):
            seen.append(dict(info))
            return "look"

    for vis in ("hidden", "remaining"):
        seen.clear()
        env = make(TOY_ID, budget=3, visibility=vis, faults={"kinds": "drop", "at_turn": 1})
        job = EpisodeJob(
            env_id=TOY_ID,
            agent="spy",
            task_index=0,
            task_id="toy-000",
            sample=0,
            seed=1,
            budget=3,
            visibility=vis,
        )
        rec = run_episode(job, Spy(), env)
        assert rec.turns == 3 and not rec.won and len(rec.faults) == 1
        assert all("fault" not in i and "faults" not in i for i in seen)
        assert all(("budget" in i) == (vis != "hidden") for i in seen)


def test_transcript_shows_budget_accounting():
    turns = transcript(TOY_ID, seed=0, budget=12)
    assert turns[0]["turn"] == 0 and "Turns left: 12 of 12" in turns[0]["observation"]
    last = turns[-1]
    assert last["episode_summary"]["won"] and last["budget"]["used"] == len(turns) - 1
    assert turns[1]["budget"] == {"limit": 12, "used": 1, "remaining": 11}


def test_oracle_agent_shares_one_oracle_call_per_turn():
    calls = []
    env = make(TOY_ID, budget=12)
    unwrapped = env.unwrapped
    original = unwrapped.oracle_actions

    def counting():
        calls.append(1)
        return original()

    unwrapped.oracle_actions = counting
    job = EpisodeJob(
        env_id=TOY_ID, agent="oracle", task_index=1, task_id="toy-001", sample=0, seed=0, budget=12
    )
    rec = run_episode(job, OracleAgent(), env)
    assert rec.won and len(calls) == rec.turns


@pytest.mark.parametrize("env_id", registered_ids(), ids=str)
def test_oracle_eps0_ground_truth_on_every_registered_env(env_id, tmp_path):
    """Pass@(1,T) = 1 for every T at or above each task's optimal length (0 below, for exact oracles)."""
    env = make(env_id, budget=None)
    n = len(env.unwrapped.task_ids)
    tasks = sorted({0, n // 2, n - 1})
    lengths = {}
    for i in tasks:
        _, info = env.reset(seed=0, options={"task_id": i})
        lengths[info["task_id"]] = env.unwrapped.cost_to_go()
    exact = env.unwrapped.oracle_exact
    env.close()
    t_max = max(lengths.values()) + 2
    run_plan(
        EvalPlan(
            env_ids=[env_id], agents={"oracle": "oracle"}, tasks=tasks, samples=1, budgets=[t_max]
        ),
        tmp_path / "o",
    )
    ids, fs = first_success_matrix(load_records(tmp_path / "o"), t_max)
    ts = list(range(1, t_max + 1))
    per_task = pass_at_kt_per_task(fs, [1], ts)[:, 0, :]
    for i, task in enumerate(ids):
        assert fs[i, 0] >= 1, f"the oracle failed {task}"
        assert all(per_task[i, t - 1] == 1.0 for t in ts if t >= lengths[task])
        if exact:
            assert fs[i, 0] == lengths[task]
            assert all(per_task[i, t - 1] == 0.0 for t in ts if t < lengths[task])


@pytest.mark.parametrize("env_id", [*sorted(registered_ids()), TOY_ID])
def test_every_family_is_seen_to_have_an_oracle(env_id):
    """The runner tracks oracle agreement only where the family fills the oracle: a family
    that fills the ``_oracle_actions`` hook (or overrides ``oracle_actions``) counts."""
    from contract_helpers import QUICK_KWARGS

    from budget_envs.eval.runner.episode import has_oracle

    family = env_id.split("/")[-1].split("-")[0]
    env = make(env_id, **QUICK_KWARGS.get(family, {})) if env_id != TOY_ID else make(env_id)
    try:
        assert has_oracle(env.unwrapped)
    finally:
        env.close()
