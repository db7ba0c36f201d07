"""Learning, measured as outcome: a trained policy beats the random agent on unseen tasks.

``budgetmix train --trainer rllib`` on small generated ALFWorld scenes (pick and place, the
train split's first 8 tasks, 11-18 receptacles) and on ToolUse level 1 (world 0); then
``budgetmix eval --agent p=policy:DIR --agent random`` on tasks not used in training (ALFWorld's
valid_seen split; ToolUse world 1) and ``compare_runs``' paired bootstrap over tasks. The
commands are the ones in docs/training.md. Tens of minutes of CPU each, and the bar is not met
yet (docs/training.md has the runs): marked ``learning``, outside the default run; run it with
``pytest -m learning tests/test_rllib_learning.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from budget_envs.eval.report import compare_runs
from budget_envs.eval.runner import load_records

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "alfworld": dict(
        env_id="BudgetMix/ALFWorld-v0",
        budget="15..30",
        train_kwargs={"level": 1, "tasks_per_level": 8},
        eval_kwargs={"level": 1, "tasks_per_level": 10, "split": "valid_seen"},
        eval_budget=30,
        extra=[
            *("--max-actions", "128", "--process-reward", "0.5", "--process-max-cost", "30"),
            *("--lr", "0.001", "--hidden", "64", "--entropy-coeff", "0.005", "--num-epochs", "6"),
        ],
        iterations=60,
    ),
    "tooluse": dict(
        env_id="BudgetMix/ToolUse-v0",
        budget="6..12",
        train_kwargs={"level": 1, "world_seed": 0},
        eval_kwargs={"level": 1, "world_seed": 1},
        eval_budget=12,
        extra=[
            *("--max-actions", "256", "--process-reward", "0.5", "--process-max-cost", "10"),
            *("--entropy-coeff", "0.02"),
        ],
        iterations=30,
    ),
}


def _cli(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1", RAY_DEDUP_LOGS="0")
    proc = subprocess.run(
        [sys.executable, "-m", "budget_envs.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=4 * 3600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.learning
@pytest.mark.parametrize("case", sorted(CASES))
def test_trained_policy_wins_more_than_random_on_unseen_tasks(case, tmp_path):
    c = CASES[case]
    policy = tmp_path / "policy"
    _cli(
        "train",
        c["env_id"],
        "--trainer",
        "rllib",
        "--budget",
        c["budget"],
        "--visibility",
        "hidden",
        "--env-kwargs",
        json.dumps(c["train_kwargs"]),
        "--seed",
        "0",
        "--gamma",
        "0.99",
        "--iterations",
        str(c["iterations"]),
        "--out",
        str(policy),
        "--quiet",
        *c["extra"],
    )
    run = tmp_path / "eval"
    _cli(
        "eval",
        c["env_id"],
        "--agent",
        f"p=policy:{policy}",
        "--agent",
        "random",
        "--env-kwargs",
        json.dumps(c["eval_kwargs"]),
        "--tasks",
        "10",
        "--samples",
        "4",
        "--budgets",
        str(c["eval_budget"]),
        "--no-oracle",
        "--out",
        str(run),
        "--quiet",
    )
    records = load_records(run)
    assert len(records) == 2 * 10 * 4
    (comp,) = compare_runs(records, records, agent_a="random", agent_b="p", n_boot=2000)
    j = comp.ts.index(c["eval_budget"])
    diff, low = float(comp.diff[0, j]), float(comp.low[0, j])
    assert np.isfinite(diff) and diff >= 0.2, (case, diff, low, float(comp.high[0, j]))
