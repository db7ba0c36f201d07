"""Minutes per cell of a language-model study (:mod:`budget_envs.study.compute`): from the
committed ``train.json`` times and the eval records' wall times, nothing else."""

from __future__ import annotations

import json
from dataclasses import replace

from budget_envs.study.compute import EVAL_WORKERS, compute_table
from budget_envs.study.provenance import TRAIN_FILE, record_dir
from budget_envs.study.trl_stage import trl_quick_spec


def _cell(tmp_path, spec, seconds):
    (fam,) = spec.families
    for arm, wall in zip(spec.arms, seconds):
        where = record_dir(tmp_path, fam, "hidden", 0, arm)
        where.mkdir(parents=True)
        record = {"arm": arm} if wall is None else {"arm": arm, "wall_time": wall}
        (where / TRAIN_FILE).write_text(json.dumps(record))
    return fam


def _records(fam, walls, seed=0):
    about = {"study_family": fam.name, "study_visibility": "hidden", "study_seed": seed}
    return [{**about, "wall_time": w} for w in walls]


def test_a_cell_costs_its_training_plus_its_evaluation_over_the_workers(tmp_path):
    spec = trl_quick_spec()  # base, fixed_generous, mix
    fam = _cell(tmp_path, spec, [6.0, 120.0, 174.0])
    records = _records(fam, [30.0, 90.0, 60.0]) + _records(fam, [999.0], seed=1)
    table = compute_table(spec, tmp_path, records)
    (row,) = table.rows
    assert row[:3] == [fam.name, "hidden", 0]
    assert row[3] == 5.0  # (6 + 120 + 174) s
    assert row[4] == 3 and row[5] == 3.0  # seed 1's record is another cell's
    assert row[6] == 5.0 + 3.0 / EVAL_WORKERS
    assert any("| tooluse | hidden | 0 | 5.0 | 3 | 3.0 | 6.5 |" in line for line in table.markdown)


def test_no_minutes_without_every_arms_time_or_for_an_rllib_study(tmp_path):
    spec = trl_quick_spec()
    fam = _cell(tmp_path, spec, [6.0, None, 174.0])
    records = _records(fam, [30.0])
    assert compute_table(spec, tmp_path, records).rows == []
    assert compute_table(replace(spec, trainer="rllib"), tmp_path, records).markdown == []
