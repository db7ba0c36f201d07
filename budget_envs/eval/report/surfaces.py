"""Pass@(K,T) surfaces of a run's records: one per (env, agent, visibility), with bootstrap bounds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from budget_envs.eval.metrics import bootstrap_pass_at_kt, first_success_matrix, pass_at_kt_per_task

__all__ = ["GroupSurface", "group_surfaces", "groups", "label"]


@dataclass
class GroupSurface:
    """The Pass@(K,T) surface of one (env, agent, visibility) group, with bootstrap bounds."""

    env_id: str
    agent: str
    visibility: str
    task_ids: list[str]
    ks: list[int]
    ts: list[int]
    per_task: np.ndarray  # (tasks, K, T)
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    errors: int = 0
    missing: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return label(self.agent, self.visibility)


def label(agent: str, visibility: str) -> str:
    """How a report names an agent: with its visibility unless the budget was hidden."""
    return agent if visibility == "hidden" else f"{agent} ({visibility})"


def groups(
    records: Sequence[dict[str, Any]], kind: str | None = "episode"
) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Records of one ``kind`` (``None``: every kind) by (env, agent, visibility)."""
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        if kind is not None and r.get("record", "episode") != kind:
            continue
        out.setdefault((r["env_id"], r["agent"], r.get("visibility", "hidden")), []).append(r)
    return out


def group_surfaces(
    records: Sequence[dict[str, Any]], *, n_boot: int = 1000, seed: int = 0
) -> list[GroupSurface]:
    """One surface per (env, agent, visibility) over the no-fault episodes.

    Budget-hidden groups cover every T up to the largest run; budget-visible groups only the T
    they ran (the metrics refuse to derive the others). K runs over 1..n.
    """
    out = []
    for (env_id, agent, vis), recs in sorted(groups(records).items()):
        clean = [r for r in recs if r.get("fault_turn") is None]
        errors = sum(1 for r in clean if r.get("error"))
        if not clean or errors == len(clean):
            continue
        budgets = sorted({int(r["budget"]) for r in clean})
        ts = list(range(1, max(budgets) + 1)) if vis == "hidden" else budgets
        rows: dict[str, dict[int, np.ndarray]] = {}
        n = max(int(r["sample"]) for r in clean) + 1
        for t in ts:
            ids, m = first_success_matrix(clean, t, samples=n)
            for i, task in enumerate(ids):
                rows.setdefault(task, {})[t] = m[i]
        task_ids = sorted(rows)
        # A task is usable when every T has every sample (no errors, no gaps).
        full = [
            task
            for task in task_ids
            if all(t in rows[task] and np.all(rows[task][t] >= 0) for t in ts)
        ]
        notes = []
        if len(full) < len(task_ids):
            notes.append(
                f"{len(task_ids) - len(full)} task(s) left out: missing or errored samples"
            )
        if not full:
            continue
        ks = list(range(1, n + 1))
        per_task = np.empty((len(full), len(ks), len(ts)))
        for j, t in enumerate(ts):
            m = np.stack([rows[task][t] for task in full])
            per_task[:, :, j] = pass_at_kt_per_task(m, ks, [t])[:, :, 0]
        mean, low, high = bootstrap_pass_at_kt(
            None, ks, ts, n_boot=n_boot, seed=seed, per_task=per_task
        )
        out.append(
            GroupSurface(
                env_id=env_id,
                agent=agent,
                visibility=vis,
                task_ids=full,
                ks=ks,
                ts=ts,
                per_task=per_task,
                mean=mean,
                low=low,
                high=high,
                errors=errors,
                missing=len(task_ids) - len(full),
                notes=notes,
            )
        )
    return out
