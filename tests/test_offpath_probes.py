"""Single-step probes off the oracle's path: after an oracle prefix and one more oracle action
that a slip replaced, the agent picks one action, scored against the oracle's set at that
state. On the toy env and on every registered id, through the runner."""

from __future__ import annotations

import pytest
from budget_envs.registry import registered_ids
from contract_helpers import TOY_ID

from budget_envs.eval.metrics import single_step_accuracy
from budget_envs.eval.runner import EvalPlan, load_records, plan_jobs, run_plan


def test_offpath_probes_are_their_own_jobs_records_and_accuracy(tmp_path):
    plan = EvalPlan(env_ids=[TOY_ID], agents={"oracle": "oracle", "random": "random"}, tasks=3,
                    samples=1, budgets=[12], probe_states=2, offpath_probe_states=2)  # fmt: skip
    jobs = [j for j in plan_jobs(plan) if type(j).__name__ == "ProbeJob"]
    assert len(jobs) == 2 * 3 * (2 + 2) and len({j.key for j in jobs}) == len(jobs)
    run_plan(plan, tmp_path / "p")
    probes = [r for r in load_records(tmp_path / "p") if r["record"] == "probe"]
    off = [p for p in probes if p["fault"] == "slip"]
    on = [p for p in probes if p["fault"] is None]
    assert len(off) == len(on) == 2 * 3 * 2
    assert {p["fault_effect"] for p in off} <= {"replaced", "dropped"} and not any(
        p["fault_effect"] for p in on
    )
    # the oracle agent picks an oracle action wherever it stands, off the path too
    assert all(p["correct"] for p in off if p["agent"] == "oracle" and p["correct"] is not None)
    # a replaced action moved the state off the path: the oracle's cost-to-go there is not
    # the on-path cost one turn later
    on_cost = {(p["task_id"], p["prefix_turns"]): p["cost_before"] for p in on}
    moved = [p for p in off if p["agent"] == "oracle" and p["fault_effect"] == "replaced"]
    assert moved, "no slip replaced an action on the toy tasks"
    assert any(p["cost_before"] != on_cost[(p["task_id"], p["prefix_turns"])] - 1 for p in moved)
    # accuracy keeps the two apart
    acc = single_step_accuracy([p for p in probes if p["agent"] == "random"])
    assert acc["prefix_states"] == len([p for p in on if p["agent"] == "random"
                                        and p["correct"] is not None])  # fmt: skip
    assert acc["offpath_states"] == len([p for p in off if p["agent"] == "random"
                                         and p["correct"] is not None])  # fmt: skip


@pytest.mark.parametrize("env_id", sorted(registered_ids()), ids=str)
def test_an_offpath_probe_runs_on_every_registered_env(env_id, tmp_path):
    plan = EvalPlan(env_ids=[env_id], agents={"oracle": "oracle"}, tasks=1, samples=1,
                    budgets=[3], offpath_probe_states=2)  # fmt: skip
    run_plan(plan, tmp_path / "p")
    probes = [r for r in load_records(tmp_path / "p") if r["record"] == "probe"]
    assert len(probes) == 2 and all(p["fault"] == "slip" for p in probes)
    assert not any(p["error"] for p in probes), [p["error"] for p in probes]
    answered = [p for p in probes if p["correct"] is not None]
    assert answered, "no off-path state to act in"
    assert all(p["fault_effect"] in ("replaced", "dropped") for p in answered)
    assert all(p["correct"] for p in answered)  # the oracle agrees with itself off the path
