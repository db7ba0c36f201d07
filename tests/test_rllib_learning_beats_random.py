"""Learning, measured as outcome: a trained policy beats the random agent on unseen tasks.

``budgetmix train --trainer rllib`` with a warm start on the oracle and then PPO (outcome reward,
gamma 1) on small generated ALFWorld scenes (pick and place, 100 training tasks of 10-12
receptacles) and on ToolUse level 1 (world 0); then ``budgetmix eval --agent p=policy:DIR
--agent random`` on tasks not used in training (ALFWorld's valid_seen split, same scene sizes;
ToolUse world 1) and ``compare_runs``' paired bootstrap over tasks: a gain of at least 0.2 with
an interval above 0. The commands are the ones in docs/training.md. About 15 minutes of CPU
each: marked ``learning``, outside the default run; run it with
``pytest -m learning tests/test_rllib_learning_beats_random.py``.
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
        budget="20",
        train_kwargs={"level": 1, "tasks_per_level": 100, "max_receptacles": 12},
        eval_kwargs={
            "level": 1,
            "tasks_per_level": 20,
            "split": "valid_seen",
            "max_receptacles": 12,
        },
        eval_budget=20,
        extra=["--max-actions", "128", "--warm-start-episodes", "300"],
        iterations=20,
    ),
    "tooluse": dict(
        env_id="BudgetMix/ToolUse-v0",
        budget="12",
        train_kwargs={"level": 1, "world_seed": 0},
        eval_kwargs={"level": 1, "world_seed": 1},
        eval_budget=12,
        extra=["--max-actions", "256", "--warm-start-episodes", "1000"],
        iterations=20,
    ),
}
#: Both cases: a warm start on the oracle (10 epochs), then PPO with outcome reward only.
COMMON = [
    *("--warm-start-epochs", "10", "--lr", "0.0001", "--entropy-coeff", "0.001"),
]


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
        "1",
        "--iterations",
        str(c["iterations"]),
        "--out",
        str(policy),
        "--quiet",
        *c["extra"],
        *COMMON,
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
        "20",
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
    assert len(records) == 2 * 20 * 4
    (comp,) = compare_runs(records, records, agent_a="random", agent_b="p", n_boot=2000)
    j = comp.ts.index(c["eval_budget"])
    diff, low = float(comp.diff[0, j]), float(comp.low[0, j])
    assert np.isfinite(diff) and diff >= 0.2 and low > 0.0, (
        case,
        diff,
        low,
        float(comp.high[0, j]),
    )
