"""The descriptive numbers of the report, from the study records: Pass@(K,T) surfaces per
family and visibility, the differences against the fixed-generous arm, turns to success, single
step against recovery. The tests of the study are in :mod:`budget_envs.study.contrasts`; the
tables and figures only format and draw them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs.study.folder import select
from budget_envs.study.spec import StudySpec


def agent_surfaces(records: Sequence[dict[str, Any]], n_boot: int) -> dict[tuple, Any]:
    """(family, visibility, agent) -> the agent's Pass@(K,T) surface over its (task, seed)
    units, with bootstrap intervals (:func:`budget_envs.eval.report.group_surfaces`)."""
    from budget_envs.eval.report import group_surfaces

    out = {}
    for vis in sorted({r["study_visibility"] for r in records}):
        for fam in sorted({r["study_family"] for r in records}):
            for s in group_surfaces(select(records, fam, vis), n_boot=n_boot, seed=0):
                out[(fam, vis, s.agent)] = s
    return out


def bootstrap(values: np.ndarray, n_boot: int, seed: int = 0) -> tuple[float, float, float]:
    """The mean of ``values`` and the 95% percentile interval of ``n_boot`` resampled means."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    means = values[idx].mean(axis=1)
    return float(values.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def won_turns(
    records: Sequence[dict[str, Any]], family: str, vis: str, agent: str, t: int, top: int
) -> list[int] | None:
    """First-success turns of ``agent``'s fault-free episodes won within ``t`` (None: no episode).

    A budget-hidden run plays once at the grid's largest T, so a smaller T keeps the episodes
    whose first success came by turn t; a budget-visible run has an episode per T."""
    mine = [
        r
        for r in select(records, family, vis, agent)
        if r.get("record", "episode") == "episode"
        and r.get("fault_turn") is None
        and r["budget"] == (top if vis == "hidden" else t)
    ]
    if not mine:
        return None
    turns = [r.get("first_success_turn") for r in mine]
    return sorted(int(x) for x in turns if x is not None and x <= t)


def compare_arms(
    records: Sequence[dict[str, Any]],
    base: str,
    arm: str,
    n_boot: int,
    folder: Path | None = None,
    *,
    figures: bool = False,
) -> list[Any]:
    """``budgetmix compare`` of ``arm`` (B) against ``base`` (A) in the same runs: paired per
    (task, seed) unit, written to ``folder`` when one is given."""
    from budget_envs.eval.report import compare_runs

    return compare_runs(
        records,
        records,
        folder,
        agent_a=base,
        agent_b=arm,
        n_boot=n_boot,
        seed=0,
        figures=figures,
    )


@dataclass
class Difference:
    """An arm's Pass@1 minus the fixed-generous arm's at the T of its family's grid."""

    family: str
    visibility: str
    arm: str
    #: T -> (B - A, low, high): ``compare``'s paired 95% interval, in grid order.
    cells: dict[int, tuple[float, float, float]]
    #: Task x seed units of the comparison.
    units: int


@dataclass
class StepRecovery:
    """An agent's single-step accuracy beside its success after one fault."""

    family: str
    visibility: str
    agent: str
    #: Share of oracle-prefix states where it picked an oracle action (budget-hidden runs only:
    #: the probes hide the budget), and how many states.
    single_step: float | None
    states: int
    #: Share of its own turns that were oracle actions.
    on_policy: float | None
    #: Success within the grid's largest T without a fault, and after one (mean over the
    #: fault turns); (fault turn, success) per fault turn.
    no_fault: float | None
    after_fault: float | None
    by_turn: list[tuple[int, float]]


def step_recovery(spec: StudySpec, records: Sequence[dict[str, Any]]) -> list[StepRecovery]:
    """Single step against recovery for every agent of every family and visibility."""
    from budget_envs.eval.metrics import recovery_table, single_step_accuracy

    rows = []
    for fam in spec.families:
        for vis in spec.visibilities:
            for agent in spec.agents:
                mine = select(records, fam.name, vis, agent)
                if not mine:
                    continue
                acc = single_step_accuracy(mine)
                top = max(fam.eval_budgets)  # faults run at the grid's largest T only
                rec = [row for row in recovery_table(mine, [top]) if row.budget == top]
                rows.append(
                    StepRecovery(
                        family=fam.name,
                        visibility=vis,
                        agent=agent,
                        single_step=acc["prefix"],
                        states=acc["prefix_states"],
                        on_policy=acc["on_policy"],
                        no_fault=rec[0].baseline_success if rec else None,
                        after_fault=float(np.mean([r.success for r in rec])) if rec else None,
                        by_turn=[(r.fault_turn, r.success) for r in rec],
                    )
                )
    return rows
