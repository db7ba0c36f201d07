"""A GRPO run that was stopped resumes from its last trainer checkpoint and ends where the
uninterrupted run ends: the same weights, the same metrics rows (bar the clock), the same stop
reasons. And the CLI's ``--resume`` refuses what it cannot continue."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys

import pytest

ENV_ID = "BudgetMix/ToolUse-v0"
SETTINGS = {
    "budget": 8,
    "env_kwargs": {"level": 1, "world_seed": 0},
    "seed": 3,
    "iterations": 3,
    "batch_size": 4,
    "num_generations": 2,
    "prompts": 4,
    "warm_start_steps": 4,
    "warm_start_episodes": 4,
    "max_completion_length": 96,
    "max_turn_tokens": 16,
    "checkpoint_every": 1,
}


class Stop(Exception):
    pass


def _stop_at(step):
    def progress(logs):
        if logs.get("step") == step and "loss" in logs:
            raise Stop(step)

    return progress


def _rows(folder):
    with open(folder / "metrics.csv", newline="") as fh:
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in csv.DictReader(fh)]


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from budget_envs.integrations.trl import train

    root = tmp_path_factory.mktemp("resume")
    whole = train(ENV_ID, out_dir=root / "whole", **SETTINGS)
    with pytest.raises(Stop):
        train(ENV_ID, out_dir=root / "stopped", progress=_stop_at(2), **SETTINGS)
    stopped = sorted(p.name for p in (root / "stopped" / "trainer").glob("checkpoint-*"))
    copy = root / "stopped-copy"
    shutil.copytree(root / "stopped", copy)
    resumed = train(ENV_ID, out_dir=root / "stopped", resume=True, **SETTINGS)
    return root, whole, resumed, stopped, copy


def test_a_stopped_run_left_its_last_checkpoint(runs):
    _, _, _, stopped, copy = runs
    assert stopped == ["checkpoint-1"]
    assert not (copy / "budgetmix_policy.json").exists()


def test_the_resumed_run_ends_as_the_uninterrupted_one(runs):
    root, whole, resumed, _, _ = runs
    a, b = _weights(root / "whole"), _weights(root / "stopped")
    assert set(a) == set(b) and all(bool((a[k] == b[k]).all()) for k in a)
    assert _rows(root / "whole") == _rows(root / "stopped")
    assert [int(r["step"]) for r in _rows(root / "stopped")] == [1, 2, 3]
    assert whole["stop_reasons"] == resumed["stop_reasons"]
    assert sum(resumed["stop_reasons"].values()) == 3 * SETTINGS["batch_size"]


def test_resume_refuses_a_finished_run_and_a_folder_with_no_checkpoint(runs, tmp_path):
    from budget_envs.integrations.trl import train

    root = runs[0]
    with pytest.raises(FileExistsError, match="finished policy"):
        train(ENV_ID, out_dir=root / "whole", resume=True, **SETTINGS)
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train(ENV_ID, out_dir=tmp_path / "empty", resume=True, **SETTINGS)


def test_the_cli_resumes_a_stopped_run(runs, tmp_path):
    root, _, _, _, copy = runs
    out = tmp_path / "cli"
    shutil.copytree(copy, out)
    kwargs = {
        k: SETTINGS[k]
        for k in (
            "num_generations",
            "prompts",
            "warm_start_steps",
            "max_completion_length",
            "max_turn_tokens",
        )
    }
    argv = [
        sys.executable, "-m", "budget_envs.cli", "train", ENV_ID, "--trainer", "trl",
        "--budget", "8", "--env-kwargs", json.dumps(SETTINGS["env_kwargs"]), "--seed", "3",
        "--iterations", "3", "--batch-size", "4", "--warm-start-episodes", "4",
        "--checkpoint-every", "1", "--trl-kwargs", json.dumps(kwargs), "--out", str(out),
        "--quiet",
    ]  # fmt: skip
    proc = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _rows(out) == _rows(root / "whole")
    again = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=900)
    assert again.returncode == 2 and "not a finished one" in again.stderr


def test_max_env_steps_ends_grpo_after_the_step_that_reaches_them(tmp_path):
    """With ``max_env_steps`` a run stops after the first GRPO step at which its episodes have
    taken that many env steps, however many ``iterations`` it was allowed; the steps it ran are
    the uncapped run's first ones. (Acting by scoring, every turn is an env step.)"""
    from budget_envs.integrations.trl import train
    from budget_envs.integrations.trl.training import env_steps

    settings = {**SETTINGS, "iterations": 3, "lr_scheduler_type": "constant", "actions": "score"}
    train(ENV_ID, out_dir=tmp_path / "all", **settings)
    every = _rows(tmp_path / "all")
    assert len(every) == 3
    first = env_steps([{k: v for k, v in every[0].items()}])
    assert first >= SETTINGS["batch_size"]  # every episode took at least one turn
    train(ENV_ID, out_dir=tmp_path / "capped", max_env_steps=first + 1, **settings)
    capped = _rows(tmp_path / "capped")
    assert capped == every[:2]
