"""Learning, measured as outcome: GRPO through ``rollout_func`` beats its own warm start.

``examples/trl_learning_curve.py`` with its defaults (the recipe in docs/training.md): the
offline tiny model, a short supervised warm start on oracle episodes of 24 TextWorld coin
collector games at level 1, then 30 GRPO steps through ``BudgetMixRollout`` with outcome reward
only (ProcessReward off); both checkpoints play 24 other games in the eval harness on the same
tasks and episode seeds. The GRPO checkpoint must win more often, with the paired bootstrap
interval over tasks (``compare_runs``, as ``budgetmix compare``) above 0. A few minutes of CPU:
marked ``slow`` and ``learning`` (outside the default run); run it with
``pytest -m learning tests/test_trl_learning.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import textworld  # noqa: E402, F401  (the textworld extra; a missing extra fails)
import trl  # noqa: E402, F401  (the trl extra)

from budget_envs.eval.report import compare_runs  # noqa: E402
from budget_envs.eval.runner import load_records  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.learning
def test_grpo_checkpoint_beats_its_warm_start_on_unseen_games(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TRL_EXPERIMENTAL_SILENCE="1")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "trl_learning_curve.py"), "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8"))

    # Outcome reward only, and evaluation on games the training never played.
    train_ids, eval_ids = metrics["train_task_ids"], metrics["eval_task_ids"]
    assert len(train_ids) == 24 and len(eval_ids) == 24
    assert not set(train_ids) & set(eval_ids)
    assert len(metrics["reward_per_step"]) == 30

    # The eval harness's records: both checkpoints, every held-out game, the same episode seeds.
    records = load_records(tmp_path / "eval")
    assert len(records) == 2 * 24 * 4 and not any(r.get("error") for r in records)
    seeds = {
        a: sorted((r["task_id"], r["seed"]) for r in records if r["agent"] == a)
        for a in ("warm_start", "grpo")
    }
    assert seeds["warm_start"] == seeds["grpo"]
    assert {t for t, _ in seeds["grpo"]} == set(eval_ids)

    # The paired bootstrap over tasks, recomputed from the records.
    (comp,) = compare_runs(records, records, agent_a="warm_start", agent_b="grpo", figures=False)
    j = comp.ts.index(metrics["eval_budget"])
    diff, low = float(comp.diff[0, j]), float(comp.low[0, j])
    assert metrics["win_rate_grpo"] > metrics["win_rate_warm_start"], metrics
    assert np.isfinite(diff) and diff > 0 and low > 0.0, (diff, low, float(comp.high[0, j]))
    assert diff == pytest.approx(metrics["gain"]) and low == pytest.approx(metrics["gain_low"])
