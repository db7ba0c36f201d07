"""What a cell of a language-model study cost: minutes of training and of evaluation per
(family, visibility, seed), from the committed ``train.json`` of each policy (its ``wall_time``,
which the TRL stage records) and the eval records' per-episode ``wall_time``.

The action-scoring study's page has no such table (its ``train.json`` holds no times).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from budget_envs.study.provenance import TRAIN_FILE, record_dir
from budget_envs.study.spec import StudySpec
from budget_envs.study.tables import Table, md_table

__all__ = ["EVAL_WORKERS", "compute_table"]

#: The eval workers a cell's minutes on the clock are estimated for (``--workers``' default:
#: the episodes' summed wall time over this many processes).
EVAL_WORKERS = 2


def _train_seconds(spec: StudySpec, out: Path, fam: Any, vis: str, seed: int) -> float | None:
    """Seconds the cell's policies took to train (None when a record lacks its time)."""
    total = 0.0
    for arm in spec.arms:
        path = record_dir(out, fam, vis, seed, arm) / TRAIN_FILE
        if not path.is_file():
            return None
        wall = json.loads(path.read_text(encoding="utf-8")).get("wall_time")
        if wall is None:
            return None
        total += float(wall)
    return total


def compute_table(spec: StudySpec, out: Path, records: Sequence[dict[str, Any]]) -> Table:
    """Minutes per cell: training (the arms' summed wall time; the base counts the loading of
    the folder it is given), evaluation (episodes and probes, summed over processes) and the
    cell on the clock with :data:`EVAL_WORKERS` eval processes. Empty for an RLlib study."""
    header = [
        "family",
        "visibility",
        "seed",
        "train_minutes",
        "eval_records",
        "eval_process_minutes",
        "cell_minutes",
    ]
    if spec.trainer != "trl":
        return Table("compute.csv", header, [], [])
    rows, shown = [], []
    for fam in spec.families:
        for vis in spec.visibilities:
            for seed in spec.seeds_for(vis, fam):
                mine = [
                    r
                    for r in records
                    if (r["study_family"], r["study_visibility"], r["study_seed"])
                    == (fam.name, vis, seed)
                ]
                train = _train_seconds(spec, out, fam, vis, seed)
                if not mine or train is None:
                    continue
                evals = sum(float(r.get("wall_time") or 0.0) for r in mine) / 60
                cell = train / 60 + evals / EVAL_WORKERS
                rows.append([fam.name, vis, seed, train / 60, len(mine), evals, cell])
                shown.append(
                    [
                        fam.name,
                        vis,
                        str(seed),
                        f"{train / 60:.1f}",
                        f"{len(mine):,}",
                        f"{evals:.1f}",
                        f"{cell:.1f}",
                    ]
                )
    if not rows:
        return Table("compute.csv", header, [], [])
    md = [
        "### Minutes per cell",
        "",
        "Training: the wall time of each arm's training summed over the cell's arms (one "
        "process). Evaluation: the wall time of every episode and probe record summed (process "
        f"minutes). A cell on the clock: training plus evaluation over {EVAL_WORKERS} processes "
        "(`--workers 2`), on this machine's 2 cores. Wall times: a cell that ran beside other "
        "work on the same cores shows more minutes than it needs alone, so the least row is the "
        "nearest to a cell's own cost.",
        "",
        *md_table(
            [
                "family",
                "budget",
                "seed",
                "training (min)",
                "eval records",
                "evaluation (process min)",
                "cell (min)",
            ],
            shown,
        ),
        "",
    ]
    return Table(
        "compute.csv",
        header,
        [[round(v, 3) if isinstance(v, float) else v for v in r] for r in rows],
        md,
    )
