"""RLlib integration: the action-scoring adapter, its module, PPO on real envs, policy agents.

Needs the ``rllib`` extra (ray[rllib] 2.60, torch 2.13 CPU).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from budget_envs.integrations.rllib import (
    MaskedTextEnv,
    TooManyActions,
    env_creator,
    hash_features,
    ppo_config,
)
from budget_envs.integrations.rllib.features import FeatureSpec, Featurizer

ROOT = Path(__file__).resolve().parents[1]
TOY = "BudgetMixTest/Toy-v0"
TOOLUSE = "BudgetMix/ToolUse-v0"
SMALL = {"max_actions": 64, "obs_dim": 64, "goal_dim": 16, "hist_dim": 16, "vocab": 512}


@pytest.fixture(scope="module")
def ray_session():
    import ray

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_DEDUP_LOGS", "0")
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=200 * 1024**2,
            log_to_driver=False,
        )
        try:
            yield ray
        finally:
            ray.shutdown()


@pytest.mark.parametrize(
    "env_id,kwargs", [(TOY, {}), (TOOLUSE, {"level": 1})], ids=["toy", "tooluse"]
)
def test_check_env(env_id, kwargs):
    env = MaskedTextEnv(env_id, budget=(3, 9), visibility="remaining", env_kwargs=kwargs, **SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)


def test_layout_masks_and_invalid_slots():
    env = MaskedTextEnv(TOY, budget=6, **SMALL)
    obs, info = env.reset(seed=1)
    spec = env.features
    assert obs["obs"].shape == (spec.state_dim,)
    assert obs["actions"].shape == (64, spec.action_tokens)
    assert env.observation_space.contains(obs)
    n = len(env.commands)
    assert n >= 2 and obs["action_mask"].tolist() == [1.0] * n + [0.0] * (64 - n)
    assert np.all(obs["actions"][n:] == 0) and np.all(obs["actions"][:n].max(axis=1) > 0)
    assert obs["obs"][-3:].tolist() == [0.0, 0.0, 0.0]  # hidden: no budget features
    # A masked slot is an invalid (empty) turn that still uses the budget.
    obs, reward, terminated, truncated, info = env.step(63)
    assert info["invalid_action"] and info["budget"]["used"] == 1
    assert env.empty_slot_turns == 1 and env.turns == 1
    assert set(info) <= {"task_id", "won", "lost", "invalid_action", "budget", "stop_reason"}
    slot = env.commands.index("look")
    obs, reward, terminated, truncated, info = env.step(slot)
    assert not info["invalid_action"]


def test_every_admissible_action_is_a_slot_beyond_sixteen():
    """ALFWorld-sized states: 40 actions, all playable, the last one included."""
    spec = FeatureSpec(**SMALL)
    feat = Featurizer(spec)
    actions = [f"go to cabinet {i}" for i in range(1, 41)]
    feat.reset("put a mug in cabinet 40")
    arrays, offered = feat.encode(
        "You are in the middle of a room.", {"admissible_actions": actions}
    )
    assert offered == actions and arrays["action_mask"].sum() == 40
    assert len({tuple(r) for r in arrays["action_feats"][:40]}) > 1  # rows tell actions apart


def test_too_many_actions_is_an_error_not_a_cut():
    env = MaskedTextEnv(TOOLUSE, budget=6, env_kwargs={"level": 1}, **dict(SMALL, max_actions=2))
    with pytest.raises(TooManyActions, match="max_actions=2"):
        env.reset(seed=0)


def test_candidates_are_the_actions_for_tool_use():
    env = MaskedTextEnv(TOOLUSE, budget=8, env_kwargs={"level": 1}, **SMALL)
    env.reset(seed=3)
    assert all(c.startswith('{"tool_calls"') for c in env.commands)
    best = env.env.unwrapped.oracle_actions()[0]
    _, _, _, _, info = env.step(env.commands.index(best))
    assert not info["invalid_action"]


@pytest.mark.parametrize("env_id,kwargs", [(TOY, {}), (TOOLUSE, {"level": 1})], ids=["toy", "tu"])
def test_hidden_is_hidden(env_id, kwargs):
    """Two episodes that differ only in their budget give the policy identical inputs."""

    def inputs(budget, visibility):
        env = MaskedTextEnv(
            env_id, budget=budget, visibility=visibility, env_kwargs=kwargs, **SMALL
        )
        obs, _ = env.reset(seed=5, options={"task_id": 0})
        rng = np.random.default_rng(0)
        seen = [obs]
        for _ in range(4):
            obs, _, terminated, truncated, _ = env.step(int(rng.integers(len(env.commands))))
            seen.append(obs)
            if terminated or truncated:
                break
        return seen

    def same(a, b):
        return len(a) == len(b) and all(
            all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b)
        )

    assert same(inputs(5, "hidden"), inputs(30, "hidden"))
    assert not same(inputs(5, "remaining"), inputs(30, "remaining"))


def test_hash_features_stable_across_processes():
    text = "You are in a kitchen. There is a type J chest here."
    here = hash_features(text, 32)
    assert here.min() >= 0.0 and here.max() == 1.0
    code = (
        "from budget_envs.integrations.rllib import hash_features\n"
        f"print(list(hash_features({text!r}, 32)))"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONHASHSEED=seed),
            cwd=ROOT,
            check=True,
        )
        assert eval(out.stdout) == here.tolist()


def test_process_reward_reaches_rllib():
    env = MaskedTextEnv(TOY, budget=20, process_reward=0.5, **SMALL)
    env.reset(seed=2)
    best = env.env.unwrapped.oracle_actions()[0]
    _, reward, _, _, _ = env.step(env.commands.index(best))
    assert reward == 0.5


@pytest.mark.parametrize("budget_terminal", [True, False])
def test_running_out_of_turns_is_terminal_for_the_trainer(budget_terminal):
    """The step on which the budget runs out is terminal by default (PPO must not bootstrap a
    lost episode with the value of its last state); a won episode ends as the env says."""
    env = MaskedTextEnv(TOY, budget=2, budget_terminal=budget_terminal, **SMALL)
    env.reset(seed=3)
    done = False
    turns = []
    while not done:
        oracle = set(env.env.unwrapped.oracle_actions())
        slot = next(i for i, c in enumerate(env.commands) if c not in oracle)
        _, reward, terminated, truncated, info = env.step(slot)
        turns.append((terminated, truncated, info.get("stop_reason")))
        done = terminated or truncated
    assert len(turns) == 2 and reward == 0.0
    assert turns[-1] == (budget_terminal, not budget_terminal, "budget")
    # a won episode is terminated either way
    env2 = MaskedTextEnv(TOY, budget=50, budget_terminal=budget_terminal, **SMALL)
    env2.reset(seed=3)
    while True:
        best = env2.env.unwrapped.oracle_actions()[0]
        _, reward, terminated, truncated, info = env2.step(env2.commands.index(best))
        if terminated or truncated:
            break
    assert (terminated, truncated, info.get("stop_reason"), reward) == (True, False, "won", 1.0)


def test_env_creator_config():
    env = env_creator({"env_id": TOY, "seed": 0, **SMALL})
    assert isinstance(env, MaskedTextEnv)
    with pytest.raises(ValueError, match="env_id"):
        env_creator({"budget": 3})
    with pytest.raises(ValueError, match="max_actions"):
        MaskedTextEnv(TOY, max_actions=0)


def test_smoke_example_exits_zero():
    """Runs before this module starts its own Ray session (one local cluster at a time)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", RAY_DEDUP_LOGS="0")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "rllib_ppo_budgetmix.py"), "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "iter 2:" in proc.stdout


def _module(env):
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from budget_envs.integrations import rllib as rl

    return RLModuleSpec(
        module_class=rl.ActionScoringTorchModule,
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config={"hidden": 16, "embed": 8},
    ).build()


def test_module_scores_every_offered_action_and_masks_the_rest():
    import pickle

    import torch
    from ray.rllib.core.columns import Columns

    from budget_envs.integrations import rllib as rl

    env = MaskedTextEnv(TOY, budget=6, **SMALL)
    module = _module(env)
    obs, _ = env.reset(seed=0)
    batch = {Columns.OBS: {k: torch.tensor(np.stack([v, v])) for k, v in obs.items()}}
    masked = torch.tensor(obs["action_mask"] == 0)
    for forward in (module.forward_exploration, module.forward_inference, module.forward_train):
        logits = forward(dict(batch))[Columns.ACTION_DIST_INPUTS]
        assert logits.shape == (2, 64)
        assert torch.all(logits[:, masked] <= -1e8) and torch.all(logits[:, ~masked] > -1e8)
    # The score of an action does not depend on its slot: permuting the rows permutes the logits.
    n = len(env.commands)
    perm = np.r_[np.arange(n)[::-1], np.arange(n, 64)]
    swapped = {k: (v[perm] if k != "obs" else v) for k, v in obs.items()}
    a = rl.score_actions(module, obs, n)
    b = rl.score_actions(module, swapped, n)
    assert np.allclose(a, b[perm[:n]], atol=1e-6)
    assert module.compute_values(dict(batch)).shape == (2,)
    assert pickle.loads(pickle.dumps(rl.ActionScoringTorchModule)) is rl.ActionScoringTorchModule


def test_a_checkpoint_pickled_before_the_package_finds_its_classes():
    """RLlib pickles the module class and the callback by reference: a checkpoint written when
    they lived in ``budget_envs.integrations.rllib_module`` names that module. The trusted
    loader aliases the old name to the module that holds them now (a fresh interpreter: the
    old name is unknown until then)."""
    code = (
        "import pickle\n"
        "old = b'cbudget_envs.integrations.rllib_module\\nActionScoringTorchModule\\n.'\n"
        "try:\n"
        "    pickle.loads(old)\n"
        "    raise SystemExit('the old name resolved before the alias')\n"
        "except ModuleNotFoundError:\n"
        "    pass\n"
        "from budget_envs.integrations import rllib as rl\n"
        "from budget_envs.integrations.rllib.weights import alias_moved_modules\n"
        "alias_moved_modules()\n"
        "assert pickle.loads(old) is rl.ActionScoringTorchModule\n"
        "callback = old.replace(b'ActionScoringTorchModule', b'BudgetMetricsCallback')\n"
        "assert pickle.loads(callback) is rl.BudgetMetricsCallback\n"
        "print('ALIASED')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ALIASED" in proc.stdout


def test_ppo_two_iterations_with_a_remote_runner(ray_session):
    """A remote env runner (its own process) builds the env from the installed package; the
    callback's metrics come back."""
    config = {"env_id": TOOLUSE, "budget": (4, 8), "seed": 0, "env_kwargs": {"level": 1}}
    algo = ppo_config(
        dict(config, **SMALL), train_batch_size=128, minibatch_size=64, num_env_runners=1, hidden=32
    ).build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        runners = result["env_runners"]
        for key in ("win_rate", "turns", "budget_limit", "budget_used", "invalid_action_rate"):
            assert key in runners and np.isfinite(runners[key]), key
        assert 4 <= runners["budget_limit"] <= 8
        assert runners["invalid_action_rate"] == 0.0  # masked slots are never sampled
    finally:
        algo.stop()


def _trained(out: Path) -> tuple[dict, list, dict]:
    """A policy folder's settings, its metrics without wall times, and its module's weights."""
    import json

    from ray.rllib.core.rl_module.rl_module import RLModule

    from budget_envs.integrations.rllib.training import module_path, read_metrics

    meta = json.loads((out / "policy.json").read_text())
    rows = [{k: v for k, v in r.items() if k != "wall_s"} for r in read_metrics(out)]
    module = RLModule.from_checkpoint(str(module_path(out).resolve()))
    weights = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
    return meta["settings"], rows, weights


def test_default_runners_spread_sampling_and_repeat_a_seed(ray_session, tmp_path):
    """On a 2-CPU Ray, `train()`'s defaults sample with one remote runner per CPU; two runs with
    the same seed give the same metrics and the same weights (runners' envs are seeded by their
    index, so the runner count is part of what a seed trains). A batch smaller than the default
    minibatch trains in minibatches of the batch."""
    from budget_envs.integrations.rllib.training import auto_env_runners, train

    assert auto_env_runners() == 2
    runs = []
    for name in ("a", "b"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            train(
                TOOLUSE,
                budget=12,
                env_kwargs={"level": 1},
                out_dir=tmp_path / name,
                iterations=2,
                seed=3,
                train_batch_size=256,
                warm_start_episodes=4,
                warm_start_epochs=2,
                checkpoint_every=1000,
            )
        runs.append(_trained(tmp_path / name))
    (settings, rows, weights), (_, rows_b, weights_b) = runs
    assert settings["num_env_runners"] == 2 and settings["minibatch_size"] == 256
    assert weights.keys() == weights_b.keys() and weights
    same = [key for key, value in weights.items() if np.array_equal(value, weights_b[key])]
    assert len(rows) == 2 and rows == rows_b, (same, rows, rows_b)
    assert same == list(weights)


def test_minibatch_larger_than_the_batch_is_a_clear_error(tmp_path):
    from budget_envs.integrations.rllib.training import train

    with pytest.raises(ValueError, match=r"minibatch_size \(300\) must be at most"):
        train(
            TOOLUSE, out_dir=tmp_path / "p", iterations=1, train_batch_size=256, minibatch_size=300
        )
    assert not (tmp_path / "p" / "policy.json").exists()


def test_local_ray_workers_run_at_the_drivers_priority():
    """Ray starts workers at niceness 15; the training Ray starts them at the driver's, so env
    runners are not starved on a busy machine (a fresh process: Ray reads it at start)."""
    code = (
        "import os, ray\n"
        "from budget_envs.integrations.rllib.training import start_local_ray\n"
        "start_local_ray(1)\n"
        "nice = ray.get(ray.remote(lambda: os.nice(0)).remote())\n"
        "print('NICE', nice, os.nice(0))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_worker_niceness"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("NICE"))
    worker, driver = map(int, line.split()[1:])
    assert worker == driver
