"""``budgetmix train`` and trained policies as eval agents (``--agent NAME=policy:DIR``).

RLlib: trains once (2 short PPO iterations on ToolUse level 1) in a subprocess, then evaluates
the policy folder through the real CLI. TRL: 2 GRPO steps of the tiny offline model on ToolUse
level 1 and on TextWorld level 1 (two games), then an eval of the folder. Needs the ``rllib``
and ``trl`` extras and ``textworld``.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from budget_envs import cli
from budget_envs.eval.runner import load_records

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "BudgetMix/ToolUse-v0"
TRAIN_KW = {"level": 1, "world_seed": 0}
#: Another generated world: tasks the policy never saw.
EVAL_KW = json.dumps({"level": 1, "world_seed": 1})


def _cli(*args, timeout=900):
    env = dict(os.environ, OMP_NUM_THREADS="1", RAY_DEDUP_LOGS="0", HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "budget_envs.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _train_args(out, iterations):
    return [
        "train",
        ENV_ID,
        "--trainer",
        "rllib",
        "--budget",
        "4..8",
        "--visibility",
        "hidden",
        "--env-kwargs",
        json.dumps(TRAIN_KW),
        "--seed",
        "0",
        "--gamma",
        "0.95",
        "--iterations",
        str(iterations),
        "--batch-size",
        "128",
        "--max-actions",
        "256",
        "--checkpoint-every",
        "1",
        "--out",
        str(out),
        "--quiet",
    ]


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "policy"
    proc = _cli(*_train_args(out, 2))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 iterations" in proc.stdout
    return out


def _rows(out):
    with (out / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def test_train_writes_a_policy_folder(policy_dir):
    meta = json.loads((policy_dir / "policy.json").read_text())
    assert meta["trainer"] == "rllib" and meta["env_id"] == ENV_ID
    assert meta["visibility"] == "hidden" and meta["budget"] == "4..8"
    assert meta["settings"]["gamma"] == 0.95 and meta["features"]["max_actions"] == 256
    assert (policy_dir / "checkpoint" / "rllib_checkpoint.json").exists()
    rows = _rows(policy_dir)
    assert [r["iteration"] for r in rows] == ["1", "2"]
    for key in ("win_rate", "turns", "budget_limit", "budget_used", "invalid_action_rate"):
        assert rows[-1][key] not in ("", "nan"), key
    assert 4 <= float(rows[-1]["budget_limit"]) <= 8
    assert (policy_dir / "curve.png").stat().st_size > 1000


def test_train_refuses_to_overwrite_and_resumes(policy_dir, tmp_path):
    proc = _cli(*_train_args(policy_dir, 2))
    assert proc.returncode == 2 and "--resume" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(policy_dir), str(copy)], check=True)
    proc = _cli(*_train_args(copy, 3), "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["iteration"] for r in _rows(copy)] == ["1", "2", "3"]


def _eval(policy_dir, out, *extra):
    return _cli(
        "eval",
        ENV_ID,
        "--agent",
        f"p=policy:{policy_dir}",
        "--env-kwargs",
        EVAL_KW,
        "--tasks",
        "3",
        "--samples",
        "2",
        "--budgets",
        "8",
        "--out",
        str(out),
        "--quiet",
        *extra,
    )


def test_policy_is_an_eval_agent_with_probes(policy_dir, tmp_path):
    proc = _eval(policy_dir, tmp_path / "run", "--probe-states", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = load_records(tmp_path / "run")
    episodes = [r for r in records if r.get("record", "episode") == "episode"]
    probes = [r for r in records if r.get("record") == "probe"]
    assert len(episodes) == 6 and all(r["error"] is None for r in episodes)
    assert all(r["agent"] == "p" and r["turns"] >= 1 for r in episodes)
    assert probes and all(r.get("error") is None for r in probes)


def test_policy_refuses_another_visibility_unless_told(policy_dir, tmp_path):
    proc = _eval(policy_dir, tmp_path / "shown", "--visibility", "remaining")
    assert proc.returncode == 1
    errors = [r["error"] for r in load_records(tmp_path / "shown")]
    assert errors and all("trained with visibility='hidden'" in (e or "") for e in errors)
    proc = _cli(
        "eval",
        ENV_ID,
        "--agent",
        f"p=policy:{policy_dir},check_visibility=false",
        "--env-kwargs",
        EVAL_KW,
        "--tasks",
        "2",
        "--samples",
        "1",
        "--budgets",
        "8",
        "--visibility",
        "remaining",
        "--out",
        str(tmp_path / "allowed"),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_policy_loads_without_a_ray_cluster(policy_dir):
    code = (
        "import ray, budget_envs, gymnasium as gym\n"
        "from budget_envs.eval.agents import make_agent\n"
        f"agent = make_agent('policy:{policy_dir}')\n"
        f"env = gym.make('{ENV_ID}', level=1, world_seed=1, budget=8)\n"
        "obs, info = env.reset(seed=0)\n"
        "info.pop('budget')\n"
        f"agent.reset(env_id='{ENV_ID}', observation=obs, info=info, seed=0)\n"
        "action = agent.act(obs, info)\n"
        "assert action in info['candidate_actions'], action\n"
        "print('ray initialized:', ray.is_initialized())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ray initialized: False" in proc.stdout


def test_trl_trainer_without_train_says_so_in_one_line(monkeypatch, capsys, tmp_path):
    import importlib.util

    if importlib.util.find_spec("trl") is not None:
        from budget_envs.integrations import trl as trl_mod

        monkeypatch.delattr(trl_mod, "train", raising=False)
    rc = cli.main(
        ["train", ENV_ID, "--trainer", "trl", "--iterations", "1", "--out", str(tmp_path / "t")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "trl" in err[0]


def test_train_usage_errors_are_one_line(capsys, tmp_path):
    rc = cli.main(["train", "BudgetMix/ToolUse", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "did you mean 'BudgetMix/ToolUse-v0'" in err[0]
    rc = cli.main(["train", ENV_ID, "--budget", "many", "--out", str(tmp_path / "y")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "bad --budget" in err[0]


def test_warm_start_fits_the_oracle_and_plays_in_eval(tmp_path):
    out = tmp_path / "warm"
    args = _train_args(out, 0)
    proc = _cli(*args, "--warm-start-episodes", "60", "--warm-start-epochs", "6")
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((out / "policy.json").read_text())
    ws = meta["warm_start"]
    assert ws["episodes"] == 60 and ws["states"] > 60
    assert meta["settings"]["warm_start_episodes"] == 60
    with (out / "warm_start.csv").open() as f:
        fit = list(csv.DictReader(f))
    assert [r["epoch"] for r in fit] == [str(i) for i in range(1, 7)]
    assert float(fit[-1]["loss"]) < float(fit[0]["loss"])
    assert float(fit[-1]["accuracy"]) > float(fit[0]["accuracy"])
    assert not (out / "metrics.csv").exists() or not _rows(out)
    run = tmp_path / "eval"
    proc = _eval(out, run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {r["agent"] for r in load_records(run)} >= {"p"}
    # resuming PPO from the warm start keeps its record and does not redo it
    proc = _cli(*_train_args(out, 1), "--warm-start-episodes", "60", "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "policy.json").read_text())["warm_start"] == ws
    assert [r["iteration"] for r in _rows(out)] == ["1"]


def test_demonstrations_are_labelled_by_the_oracle():
    from budget_envs.integrations.rllib import warmstart as ws

    config = {"env_id": ENV_ID, "budget": 12, "max_actions": 256, "env_kwargs": TRAIN_KW}
    demos = ws.collect_demonstrations(config, episodes=6, explore=0.0, seed=3)
    again = ws.collect_demonstrations(config, episodes=6, explore=0.0, seed=3)
    assert len(demos) > 6 and demos.summary() == again.summary()
    assert demos.wins == 6  # explore=0 plays the oracle: every episode is won
    for state, target in zip(demos.states, demos.targets):
        n = len(target)
        assert target.any() and state["action_mask"].shape == (n,)
        assert state["action_mask"].sum() == n


# ---------------------------------------------------------------------- --trainer trl
#: The smallest TRL run that still warm-starts and takes GRPO steps (2 steps of 4 episodes).
TRL_SMALL = [
    "--iterations",
    "2",
    "--batch-size",
    "4",
    "--warm-start-episodes",
    "4",
]
TRL_KWARGS = {
    "num_generations": 2,
    "prompts": 4,
    "warm_start_steps": 10,
    "max_completion_length": 128,
    "max_turn_tokens": 16,
}


def _train_trl(env_id, env_kwargs, out, *extra, **trl_kwargs):
    return _cli(
        "train",
        env_id,
        "--trainer",
        "trl",
        "--budget",
        "8",
        "--env-kwargs",
        json.dumps(env_kwargs),
        *TRL_SMALL,
        "--trl-kwargs",
        json.dumps({**TRL_KWARGS, **trl_kwargs}),
        "--out",
        str(out),
        "--quiet",
        *extra,
    )


def _check_trl_summary(proc, out, env_id, steps=2):
    assert proc.returncode == 0, proc.stderr[-3000:]
    settings = json.loads((out / "budgetmix_policy.json").read_text())
    assert settings["env_id"] == env_id and settings["visibility"] == "hidden"
    assert (out / "config.json").exists() and (out / "warm_start" / "config.json").exists()
    text = proc.stdout
    assert f"{steps} GRPO steps in" in text and "episodes by stop reason: " in text
    assert f"Policy in {out} " in text
    assert f"Next: budgetmix eval {env_id} --agent p=policy:{out} --visibility hidden" in text
    assert "{'loss'" not in text  # the trainer's own log printer is off


@pytest.fixture(scope="module")
def trl_policy(tmp_path_factory):
    out = tmp_path_factory.mktemp("trl") / "policy"
    proc = _train_trl(ENV_ID, {"level": 1}, out, "--checkpoint-every", "1")
    _check_trl_summary(proc, out, ENV_ID)
    return out


def test_trl_checkpoints_every_step_play_as_policies(trl_policy, tmp_path):
    from safetensors.torch import load_file

    steps = sorted(p.name for p in (trl_policy / "checkpoints").iterdir())
    assert steps == ["step-0001", "step-0002"]
    meta = json.loads(
        (trl_policy / "checkpoints" / "step-0001" / "budgetmix_policy.json").read_text()
    )
    assert meta["step"] == 1 and meta["env_id"] == ENV_ID
    # The last checkpoint is the final policy.
    final = load_file(str(trl_policy / "model.safetensors"))
    last = load_file(str(trl_policy / "checkpoints" / "step-0002" / "model.safetensors"))
    assert final and set(final) == set(last)
    assert all(bool((final[k] == last[k]).all()) for k in final)
    run = tmp_path / "run"
    proc = _cli(
        "eval", ENV_ID, "--agent", f"c1=policy:{trl_policy / 'checkpoints' / 'step-0001'}",
        "--env-kwargs", '{"level": 1}', "--tasks", "1", "--samples", "1", "--budgets", "8",
        "--out", str(run), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["agent"] for r in load_records(run)] == ["c1"]


def test_trl_train_end_to_end_writes_a_policy_the_eval_plays(trl_policy, tmp_path):
    run = tmp_path / "run"
    proc = _cli(
        "eval",
        ENV_ID,
        "--agent",
        f"p=policy:{trl_policy}",
        "--env-kwargs",
        '{"level": 1}',
        "--tasks",
        "1",
        "--samples",
        "1",
        "--budgets",
        "8",
        "--out",
        str(run),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    episodes = load_records(run)
    assert len(episodes) == 1 and episodes[0]["agent"] == "p" and episodes[0]["error"] is None
    assert 1 <= episodes[0]["turns"] <= 8
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith(ENV_ID)]
    assert len(rows) == 1 and rows[0][1] == "p", proc.stdout


def test_trl_policy_refuses_another_visibility(trl_policy, tmp_path):
    proc = _cli(
        "eval",
        ENV_ID,
        "--agent",
        f"p=policy:{trl_policy}",
        "--env-kwargs",
        '{"level": 1}',
        "--tasks",
        "1",
        "--samples",
        "1",
        "--budgets",
        "8",
        "--visibility",
        "remaining",
        "--out",
        str(tmp_path / "shown"),
        "--quiet",
    )
    assert proc.returncode == 1
    errors = [r["error"] for r in load_records(tmp_path / "shown")]
    assert errors and all("trained with visibility='hidden'" in (e or "") for e in errors)


def test_trl_train_on_textworld_level_1(tmp_path):
    """The command of the report (TextWorld level 1, --budget 8), kept small; two training
    games, so a cold game cache generates two games, not ten."""
    out = tmp_path / "tw"
    proc = _train_trl(
        "BudgetMix/TextWorld-v0",
        {"level": 1},
        out,
        train_tasks=["custom-L1-s0", "custom-L1-s1"],
    )
    _check_trl_summary(proc, out, "BudgetMix/TextWorld-v0")


def test_trl_iterations_0_keeps_the_warm_start_as_the_policy(tmp_path):
    out = tmp_path / "warm"
    proc = _train_trl(ENV_ID, {"level": 1}, out, "--iterations", "0")
    _check_trl_summary(proc, out, ENV_ID, steps=0)
    assert "episodes by stop reason: none." in proc.stdout
    assert not (out / "trainer").exists()  # no GRPO trainer ran
    weights = (out / "model.safetensors").read_bytes()
    assert weights == (out / "warm_start" / "model.safetensors").read_bytes()


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--gamma", "0.9"], "--gamma: RLlib option(s) that --trainer trl does not take"),
        (["--max-actions", "64"], "--max-actions: RLlib option(s)"),
        (["--resume"], "nothing to resume"),
        (["--trl-kwargs", '{"nope": 1}'], "unknown key 'nope'"),
        (["--trl-kwargs", '{"learning_rate": 0.1}'], "give 'learning_rate' as --lr"),
        (["--trl-kwargs", '{"seed": 3}'], "'seed' is set by the command's own flags"),
    ],
)
def test_trl_usage_errors_are_one_line(capsys, tmp_path, extra, says):
    out = tmp_path / "never"
    rc = cli.main(["train", ENV_ID, "--trainer", "trl", "--out", str(out), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and says in err[0], err
    assert not out.exists()


def test_trl_kwargs_with_rllib_and_an_existing_trl_policy_are_usage_errors(
    capsys, tmp_path, trl_policy
):
    rc = cli.main(["train", ENV_ID, "--out", str(tmp_path / "x"), "--trl-kwargs", "{}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--trl-kwargs is for --trainer trl" in err[0]
    rc = cli.main(["train", ENV_ID, "--trainer", "trl", "--out", str(trl_policy)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "already holds a policy" in err[0]


def test_trl_train_writes_a_metrics_csv_per_rollout_batch(trl_policy):
    import csv

    rows = list(csv.DictReader(open(trl_policy / "metrics.csv")))
    assert rows, "no metrics rows"
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(steps) and steps[0] >= 1
    for row in rows:
        shares = [float(row[k]) for k in row if k.startswith("stop_")]
        assert abs(sum(shares) - 1.0) < 1e-9
        assert 0.0 <= float(row["win_rate"]) <= 1.0
        assert float(row["budget_mean"]) >= 1 and float(row["tokens_mean"]) > 0
        assert 0.0 <= float(row["invalid_share"]) <= 1.0
