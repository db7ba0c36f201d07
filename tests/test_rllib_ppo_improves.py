"""PPO learns, in ``make test``: from a deliberately weak imitation start, RLlib PPO with the
default speed settings (packed scoring, 16 vector envs, one torch thread) raises the win rate on
its training tasks, with a paired bootstrap interval above 0.

ToolUse level 1, 20 training tasks, T=12, budget hidden. The start is 16 oracle episodes fitted
for 20 epochs (it won 3 of 160 episodes when measured: room to improve); PPO then runs from that checkpoint
(``--resume``). Both policies play the same 20 tasks x 8 episode seeds through ``budgetmix eval``,
and ``compare_runs`` bootstraps the difference over tasks. The assertion is a margin (the lower
end above 0), not the measured gain. One Ray serves both training calls (``train`` reuses it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from budget_envs.eval.report import compare_runs
from budget_envs.eval.runner import load_records
from budget_envs.integrations.rllib.training import read_metrics, train

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "BudgetMix/ToolUse-v0"
KWARGS = {"level": 1, "tasks_per_level": 20}
BUDGET = 12
TASKS, SAMPLES = 20, 8
ITERATIONS = 16


@pytest.mark.slow
def test_ppo_raises_the_training_task_win_rate_over_a_weak_imitation_start(ray_running, tmp_path):
    start, rl = tmp_path / "start", tmp_path / "rl"
    common = dict(budget=BUDGET, env_kwargs=KWARGS, seed=0, gamma=1.0)
    train(
        ENV_ID, out_dir=start, iterations=0, warm_start_episodes=16, warm_start_epochs=20, **common
    )
    assert ray_running.is_initialized(), "train() shut down a Ray it did not start"
    shutil.copytree(start, rl)
    train(ENV_ID, out_dir=rl, iterations=ITERATIONS, resume=True, **common)
    rows = read_metrics(rl)
    assert [int(r["iteration"]) for r in rows] == list(range(1, ITERATIONS + 1))
    assert rows[-1]["timesteps"] >= ITERATIONS * 1024

    run = tmp_path / "eval"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "budget_envs.cli",
            "eval",
            ENV_ID,
            "--agent",
            f"start=policy:{start}",
            "--agent",
            f"rl=policy:{rl}",
            "--env-kwargs",
            json.dumps(KWARGS),
            "--tasks",
            str(TASKS),
            "--samples",
            str(SAMPLES),
            "--budgets",
            str(BUDGET),
            "--no-oracle",
            "--out",
            str(run),
            "--quiet",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = load_records(run)
    assert len(records) == 2 * TASKS * SAMPLES
    (comp,) = compare_runs(
        records, records, agent_a="start", agent_b="rl", n_boot=2000, figures=False
    )
    j = comp.ts.index(BUDGET)
    diff, low, high = (float(x[0, j]) for x in (comp.diff, comp.low, comp.high))
    wins = {a: np.mean([r["won"] for r in records if r["agent"] == a]) for a in ("start", "rl")}
    print(
        f"win rate start {wins['start']:.3f} -> rl {wins['rl']:.3f}; diff {diff:+.3f} [{low:+.3f}, {high:+.3f}]"
    )
    assert wins["start"] < 0.6, f"the start is not weak: {wins}"
    assert np.isfinite(diff) and low > 0.0, (wins, diff, low, high)
