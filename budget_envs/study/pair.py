"""Two arms of a finished study side by side: what ``budgetmix demo`` prints about its pair."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budget_envs.study.folder import compare_dir, load_study_records, policy_root, select
from budget_envs.study.spec import Family, StudySpec
from budget_envs.study.stats import agent_surfaces


@dataclass
class PairSummary:
    """Two arms of one (family, visibility) side by side, with the agents of the same runs:
    what ``budgetmix demo`` prints about its trained pair (:func:`pair_summary`)."""

    family: Family
    visibility: str
    arm_a: str
    arm_b: str
    #: The agents with records, in report order: the arms, random, the reference agents.
    agents: list[str]
    #: The K shown (1 and the number of samples) and the T shown (the family's grid).
    ks: list[int]
    ts: list[int]
    #: agent -> K -> Pass@(K,T) at each T of ``ts``.
    pass_at: dict[str, dict[int, list[float]]]
    #: K -> (B - A, low, high) at each T of ``ts``: ``compare``'s paired 95% interval.
    diff: dict[int, list[tuple[float, float, float]]]
    #: Task x seed units of the comparison.
    units: int
    #: Paired no-fault episodes (same task, sample and seed) in which the two arms played the
    #: same actions, and all such pairs.
    same_play: tuple[int, int]
    #: arm -> its last PPO iteration's metrics row (win rate, turns, budget_limit, ...).
    training: dict[str, dict[str, float]]
    #: The ``compare`` folder of B against A (difference.csv, compare.md, the heatmap).
    compare_dir: Path
    #: The heatmap ``compare`` drew there (empty without figures).
    figures: list[Path]


def pair_summary(
    spec: StudySpec,
    out: str | os.PathLike,
    *,
    arm_a: str = "fixed_generous",
    arm_b: str | None = None,
    records: Sequence[dict[str, Any]] | None = None,
) -> PairSummary:
    """``arm_b`` (default: the spec's other arm) against ``arm_a`` in the first family and
    visibility of a study folder that :func:`run_study` finished: Pass@(K,T) of every agent of
    the runs, and the difference as :func:`compare_stage` wrote it (its ``difference.csv``)."""
    out = Path(out)
    others = [a for a in spec.arms if a != arm_a]
    arm_b = others[0] if arm_b is None and others else arm_b
    if arm_a not in spec.arms or arm_b not in spec.arms or arm_a == arm_b:
        raise ValueError(f"need two arms of {spec.arms!r}, got {arm_a!r} and {arm_b!r}")
    fam, vis = spec.families[0], spec.visibilities[0]
    records = load_study_records(out) if records is None else records
    mine = select(records, fam.name, vis)
    surfaces = agent_surfaces(mine, spec.n_boot)
    ts = sorted(fam.eval_budgets)
    ks = sorted({1, fam.eval_samples})
    pass_at: dict[str, dict[int, list[float]]] = {}
    for agent in spec.agents:
        surf = surfaces.get((fam.name, vis, agent))
        if surf is None:
            continue
        pass_at[agent] = {
            k: [
                float(surf.mean[surf.ks.index(k), surf.ts.index(t)])
                if k in surf.ks and t in surf.ts
                else float("nan")
                for t in ts
            ]
            for k in ks
        }
    folder = compare_dir(out, fam, vis, arm_b, arm_a)
    csv_path = folder / "difference.csv"
    if not csv_path.exists():
        raise FileNotFoundError(f"no comparison {csv_path}: run the study's compare stage first")
    cells: dict[tuple[int, int], tuple[float, float, float]] = {}
    with csv_path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            cells[int(row["K"]), int(row["T"])] = (
                float(row["diff"]),
                float(row["low"]),
                float(row["high"]),
            )
    nan = (float("nan"),) * 3
    diff = {k: [cells.get((k, t), nan) for t in ts] for k in ks}
    plays: dict[str, dict[tuple, Any]] = {arm_a: {}, arm_b: {}}
    for r in mine:
        clean = r.get("record") == "episode" and r.get("fault_turn") is None
        if r["agent"] in plays and clean and r.get("actions") is not None:
            plays[r["agent"]][r["task_id"], r["sample"], r["budget"]] = r["actions"]
    pairs = sorted(set(plays[arm_a]) & set(plays[arm_b]))
    same = sum(1 for key in pairs if plays[arm_a][key] == plays[arm_b][key])
    from budget_envs.integrations.rllib_train import read_metrics

    training = {}
    for arm in (arm_a, arm_b):
        rows = read_metrics(policy_root(out, fam, vis, spec.seeds[0]) / arm)
        if rows:
            training[arm] = rows[-1]
    units = len(surfaces[(fam.name, vis, arm_a)].task_ids) if pass_at.get(arm_a) else 0
    return PairSummary(
        family=fam,
        visibility=vis,
        arm_a=arm_a,
        arm_b=arm_b,
        agents=list(pass_at),
        ks=ks,
        ts=ts,
        pass_at=pass_at,
        diff=diff,
        units=units,
        same_play=(same, len(pairs)),
        training=training,
        compare_dir=folder,
        figures=sorted(folder.glob("*.png")),
    )
