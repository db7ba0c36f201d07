"""The arms of a finished study beside their base: what ``budgetmix demo`` prints about them."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budget_envs.study.folder import compare_dir, load_study_records, policy_root, select
from budget_envs.study.spec import BASE, Family, StudySpec
from budget_envs.study.stats import agent_surfaces


@dataclass
class PairSummary:
    """The base and the RL arms of one (family, visibility) side by side, with the agents of the
    same runs: what ``budgetmix demo`` prints about its trained arms (:func:`pair_summary`)."""

    family: Family
    visibility: str
    #: The arm every other is compared with (``base``), and the others, in spec order.
    base: str
    arms: list[str]
    #: The agents with records, in report order: the arms, random, the reference agents.
    agents: list[str]
    #: The K shown (1 and the number of samples) and the T shown (the family's grid).
    ks: list[int]
    ts: list[int]
    #: agent -> K -> Pass@(K,T) at each T of ``ts``.
    pass_at: dict[str, dict[int, list[float]]]
    #: arm -> K -> (arm - base, low, high) at each T of ``ts``: ``compare``'s paired 95% interval.
    diff: dict[str, dict[int, list[tuple[float, float, float]]]]
    #: Task x seed units of the comparison.
    units: int
    #: arm -> (paired no-fault episodes in which it played the same actions as the base, all
    #: such pairs).
    same_play: dict[str, tuple[int, int]]
    #: arm -> its last PPO iteration's metrics row (win rate, turns, budget_limit, ...).
    training: dict[str, dict[str, float]]
    #: arm -> the ``compare`` folder of the arm against the base (difference.csv, the heatmap).
    compare_dirs: dict[str, Path]
    #: The heatmaps ``compare`` drew there (empty without figures).
    figures: list[Path]


def _difference(folder: Path, ks: list[int], ts: list[int]) -> dict[int, list[tuple]]:
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
    return {k: [cells.get((k, t), nan) for t in ts] for k in ks}


def pair_summary(
    spec: StudySpec,
    out: str | os.PathLike,
    *,
    base: str = BASE,
    records: Sequence[dict[str, Any]] | None = None,
) -> PairSummary:
    """Every other arm against ``base`` in the first family and visibility of a study folder
    that :func:`run_study` finished: Pass@(K,T) of every agent of the runs, and each difference
    as :func:`compare_stage` wrote it (its ``difference.csv``)."""
    out = Path(out)
    arms = [a for a in spec.arms if a != base]
    if base not in spec.arms or not arms:
        raise ValueError(f"need {base!r} and another arm among {spec.arms!r}")
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
    folders = {arm: compare_dir(out, fam, vis, arm, base) for arm in arms}
    diff = {arm: _difference(folder, ks, ts) for arm, folder in folders.items()}
    plays: dict[str, dict[tuple, Any]] = {a: {} for a in spec.arms}
    for r in mine:
        clean = r.get("record") == "episode" and r.get("fault_turn") is None
        if r["agent"] in plays and clean and r.get("actions") is not None:
            plays[r["agent"]][r["task_id"], r["sample"], r["budget"]] = r["actions"]
    same_play = {}
    for arm in arms:
        pairs = sorted(set(plays[base]) & set(plays[arm]))
        same = sum(1 for key in pairs if plays[base][key] == plays[arm][key])
        same_play[arm] = (same, len(pairs))
    from budget_envs.integrations.rllib.training import read_metrics

    training = {}
    for arm in arms:
        rows = read_metrics(policy_root(out, fam, vis, spec.seeds[0]) / arm)
        if rows:
            training[arm] = rows[-1]
    units = len(surfaces[(fam.name, vis, base)].task_ids) if pass_at.get(base) else 0
    return PairSummary(
        family=fam,
        visibility=vis,
        base=base,
        arms=arms,
        agents=list(pass_at),
        ks=ks,
        ts=ts,
        pass_at=pass_at,
        diff=diff,
        units=units,
        same_play=same_play,
        training=training,
        compare_dirs=folders,
        figures=sorted(f for folder in folders.values() for f in folder.glob("*.png")),
    )
