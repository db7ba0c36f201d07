"""The numbers of the report, from the study records: Pass@(K,T) surfaces per family and
visibility, bootstrap intervals, each arm's learning status, turns to success."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from budget_envs.study.spec import RANDOM, StudySpec, arm_pmf


@dataclass
class LearningRow:
    """An arm against the random agent on its own training budget (pmf-weighted Pass@1)."""

    family: str
    visibility: str
    arm: str
    budgets: str
    arm_pass: float
    random_pass: float
    diff: float
    low: float
    high: float
    units: int

    @property
    def learned(self) -> bool:
        return self.low > 0


def agent_surfaces(records: Sequence[dict[str, Any]], n_boot: int) -> dict[tuple, Any]:
    from budget_envs.eval.report import group_surfaces

    out = {}
    for vis in sorted({r["study_visibility"] for r in records}):
        for fam in sorted({r["study_family"] for r in records}):
            mine = [r for r in records if r["study_family"] == fam and r["study_visibility"] == vis]
            for s in group_surfaces(mine, n_boot=n_boot, seed=0):
                out[(fam, vis, s.agent)] = s
    return out


def bootstrap(values: np.ndarray, n_boot: int, seed: int = 0) -> tuple[float, float, float]:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    means = values[idx].mean(axis=1)
    return float(values.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def learning_status(
    spec: StudySpec, records: Sequence[dict[str, Any]], surfaces: Mapping[tuple, Any] | None = None
) -> list[LearningRow]:
    """Each arm's Pass@1 minus random's on the arm's own training budgets, paired per (task,
    seed), with a bootstrap interval. A fixed arm is scored at its T; a BudgetMix arm at the
    evaluated T of its range, weighted by its training distribution. "Learned" means the
    interval lies above 0."""
    surfaces = agent_surfaces(records, spec.n_boot) if surfaces is None else surfaces
    rows = []
    for fam in spec.families:
        for vis in spec.visibilities:
            base = surfaces.get((fam.name, vis, RANDOM))
            for arm in spec.arms:
                s = surfaces.get((fam.name, vis, arm))
                if s is None or base is None:
                    continue
                pmf = arm_pmf(arm, fam.tight, fam.generous)
                ts = [t for t in sorted(pmf) if t in s.ts and t in base.ts]
                if vis != "hidden":  # visible runs have only the grid's T
                    ts = [t for t in ts if t in fam.eval_budgets]
                if not ts:
                    continue
                w = np.array([pmf[t] for t in ts])
                w = w / w.sum()
                tasks = sorted(set(s.task_ids) & set(base.task_ids))
                ka, kb = s.per_task, base.per_task
                a = np.array(
                    [[ka[s.task_ids.index(u), 0, s.ts.index(t)] for t in ts] for u in tasks]
                )
                b = np.array(
                    [[kb[base.task_ids.index(u), 0, base.ts.index(t)] for t in ts] for u in tasks]
                )
                diff, low, high = bootstrap((a - b) @ w, spec.n_boot)
                rows.append(
                    LearningRow(
                        family=fam.name,
                        visibility=vis,
                        arm=arm,
                        budgets=str(ts[0]) if len(ts) == 1 else f"{ts[0]}..{ts[-1]} ({len(ts)} T)",
                        arm_pass=float((a @ w).mean()),
                        random_pass=float((b @ w).mean()),
                        diff=diff,
                        low=low,
                        high=high,
                        units=len(tasks),
                    )
                )
    return rows


def won_turns(
    records: Sequence[dict[str, Any]], family: str, vis: str, agent: str, t: int, top: int
) -> list[int] | None:
    """First-success turns of ``agent``'s fault-free episodes won within ``t`` (None: no episode).

    A budget-hidden run plays once at the grid's largest T, so a smaller T keeps the episodes
    whose first success came by turn t; a budget-visible run has an episode per T."""
    mine = [
        r
        for r in records
        if r.get("record", "episode") == "episode"
        and r["study_family"] == family
        and r["study_visibility"] == vis
        and r["agent"] == agent
        and r.get("fault_turn") is None
        and r["budget"] == (top if vis == "hidden" else t)
    ]
    if not mine:
        return None
    turns = [r.get("first_success_turn") for r in mine]
    return sorted(int(x) for x in turns if x is not None and x <= t)
