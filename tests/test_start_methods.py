"""Same records whether the local workers start by ``fork`` or by ``spawn`` (and in-process),
on every registered id: nothing a worker plays depends on what it inherited from the driver."""

from __future__ import annotations

import json
import multiprocessing

import pytest
from budget_envs.registry import registered_ids

from budget_envs.eval.runner import EvalPlan, load_records, plan_jobs, run_plan

IDS = registered_ids()
METHODS = [m for m in ("fork", "spawn") if m in multiprocessing.get_all_start_methods()]


def _strip(records):
    return sorted(
        json.dumps({k: v for k, v in r.items() if k != "wall_time"}, sort_keys=True)
        for r in records
    )


def test_both_start_methods_exist_here():
    assert METHODS == ["fork", "spawn"]


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_fork_and_spawn_workers_give_the_same_records(env_id, tmp_path):
    plan = EvalPlan(
        env_ids=[env_id],
        agents={"eps": "oracle:epsilon=0.3", "random": "random"},
        tasks=[0, 1],
        samples=2,
        budgets=[8],
        fault_turns=[2],
        seed=3,
    )
    run_plan(plan, tmp_path / "inline")
    expected = _strip(load_records(tmp_path / "inline"))
    assert len(expected) == len(plan_jobs(plan))
    assert not any(json.loads(r)["error"] for r in expected)
    for method in METHODS:
        run_plan(plan, tmp_path / method, workers=2, chunk=2, start_method=method)
        assert _strip(load_records(tmp_path / method)) == expected, method
