"""``train --resume`` after a run was killed between two checkpoints: the iterations past the
restored checkpoint are trained again, and their rows of ``metrics.csv`` are replaced, not kept
beside the new ones (a study arm resumed that way once counted 4 iterations it never kept, and
ended 8% short of its env steps)."""

from __future__ import annotations

import warnings

import pytest

from budget_envs.integrations.rllib.training import read_metrics, train

TOOLUSE = "BudgetMix/ToolUse-v0"
BATCH = 128


class Killed(Exception):
    """Stands for the signal that ends a training process."""


def _train(out, iterations, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return train(
            TOOLUSE,
            budget=8,
            env_kwargs={"level": 1},
            out_dir=out,
            iterations=iterations,
            seed=1,
            train_batch_size=BATCH,
            minibatch_size=BATCH,
            num_epochs=1,
            hidden=32,
            num_env_runners=1,
            warm_start_episodes=2,
            warm_start_epochs=1,
            **kwargs,
        )


def test_a_run_killed_between_checkpoints_resumes_from_its_checkpoint(ray_running, tmp_path):
    out = tmp_path / "arm"

    def kill_after_three(it, _total, _row):
        if it == 3:
            raise Killed

    with pytest.raises(Killed):
        _train(out, 5, checkpoint_every=2, progress=kill_after_three)
    killed = read_metrics(out)
    assert [int(r["iteration"]) for r in killed] == [1, 2, 3]  # the checkpoint holds 2

    result = _train(out, 5, checkpoint_every=2, resume=True)
    rows = read_metrics(out)
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3, 4, 5]
    assert rows[:2] == killed[:2]  # the checkpointed iterations are kept as they were
    steps = [r["timesteps"] for r in rows]
    assert all(b - a >= BATCH for a, b in zip(steps, steps[1:])), steps
    assert 5 * BATCH <= steps[-1] < 6 * BATCH, steps
    walls = [r["wall_s"] for r in rows]
    assert walls == sorted(walls), walls
    assert result["iterations"] == 5
