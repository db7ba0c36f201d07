"""RLlib integration: the masked discrete adapter, our masking RLModule, PPO on a real env.

Needs the ``rllib`` extra (ray[rllib] 2.60, torch 2.13 CPU) and ``textworld``.
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
    env_creator,
    hash_features,
    ppo_config,
)

ROOT = Path(__file__).resolve().parents[1]
REAL_ID = "BudgetMix/TextWorld-v0"
REAL_KWARGS = {"level": 1, "seeds": 4}
TOY = "BudgetMixTest/Toy-v0"
ENV_CONFIG = {
    "env_id": REAL_ID,
    "budget": (4, 12),
    "max_actions": 16,
    "seed": 0,
    "env_kwargs": REAL_KWARGS,
}


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


def _runner_counts(runner):
    """(turns, turns on a masked slot) over the MaskedTextEnv adapters of one env runner."""
    envs = [e.unwrapped for e in runner.env.unwrapped.envs]
    return sum(e.turns for e in envs), sum(e.empty_slot_turns for e in envs)


def _train(iterations: int, num_env_runners: int = 0):
    """PPO on the real env; returns (returns per iteration, [(turns, masked turns)] per runner)."""
    algo = ppo_config(
        ENV_CONFIG, train_batch_size=256, seed=0, num_env_runners=num_env_runners
    ).build_algo()
    try:
        returns = []
        for _ in range(iterations):
            result = algo.train()
            returns.append(result["env_runners"].get("episode_return_mean", float("nan")))
        counts = algo.env_runner_group.foreach_env_runner(
            _runner_counts, local_env_runner=num_env_runners == 0
        )
        return returns, counts
    finally:
        algo.stop()


@pytest.mark.parametrize("env_id,kwargs", [(TOY, {}), (REAL_ID, REAL_KWARGS)], ids=["toy", "real"])
def test_check_env(env_id, kwargs):
    env = MaskedTextEnv(
        env_id, budget=(3, 9), visibility="remaining", max_actions=8, env_kwargs=kwargs
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)


def test_observation_layout_and_invalid_slots():
    env = MaskedTextEnv(TOY, budget=6, max_actions=8, obs_dim=64, slot_dim=8)
    obs, info = env.reset(seed=1)
    assert obs["observations"].shape == (64 + 3 + 8 * 8,)
    assert env.observation_space.contains(obs)
    n = len(info["admissible_actions"])
    assert obs["action_mask"].tolist() == [1.0] * n + [0.0] * (8 - n)
    assert obs["observations"][64:67] == pytest.approx([1.0, 0.0, 0.06])  # 6 of 6 left, 6/100
    # A masked slot is an invalid (empty) turn that still uses the budget.
    obs, reward, terminated, truncated, info = env.step(7)
    assert info["invalid_action"] and info["budget"]["used"] == 1
    assert env.empty_slot_turns == 1 and env.turns == 1
    # A valid slot runs its command.
    slot = env.commands.index("look")
    obs, reward, terminated, truncated, info = env.step(slot)
    assert not info["invalid_action"]


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


def test_placeholder_filled_with_goal():
    env = MaskedTextEnv("BudgetMix/WebShop-v0", budget=8, env_kwargs={"level": 1})
    obs, info = env.reset(seed=0)
    assert info["admissible_actions"] == ["search[...]"]
    assert env.commands == [f"search[{' '.join(info['goal'].split())[:200]}]"]
    obs, _, _, _, info = env.step(0)
    assert not info["invalid_action"] and len(env.commands) > 2  # results came back


def test_process_reward_reaches_rllib():
    env = MaskedTextEnv(TOY, budget=20, process_reward=0.5)
    env.reset(seed=2)
    best = env.env.unwrapped.oracle_actions()[0]
    _, reward, _, _, info = env.step(env.commands.index(best))
    assert info["process_reward"] == 0.5 and reward == 0.5


def test_env_creator_config():
    env = env_creator(dict(ENV_CONFIG, env_id=TOY, env_kwargs={}))
    assert isinstance(env, MaskedTextEnv)
    with pytest.raises(ValueError, match="env_id"):
        env_creator({"budget": 3})
    with pytest.raises(ValueError, match="0"):
        MaskedTextEnv(TOY, max_actions=0)


def test_module_masks_logits():
    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from budget_envs.integrations import rllib as rl

    env = MaskedTextEnv(TOY, budget=6, max_actions=8)
    module = RLModuleSpec(
        module_class=rl.MaskedPPOTorchModule,
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config=DefaultModelConfig(fcnet_hiddens=[16]),
    ).build()
    obs, _ = env.reset(seed=0)
    batch = {Columns.OBS: {k: torch.tensor(np.stack([v, v])) for k, v in obs.items()}}
    for forward in (module.forward_exploration, module.forward_inference, module.forward_train):
        logits = forward(dict(batch))[Columns.ACTION_DIST_INPUTS]
        masked = obs["action_mask"] == 0
        assert torch.all(logits[:, torch.tensor(masked)] <= -1e8)
        assert torch.all(logits[:, torch.tensor(~masked)] > -1e8)
    values = module.compute_values(dict(batch))
    assert values.shape == (2,)
    # Pickled by reference: remote runners rebuild the same class from the installed package.
    import pickle

    assert pickle.loads(pickle.dumps(rl.MaskedPPOTorchModule)) is rl.MaskedPPOTorchModule


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


def test_ppo_two_iterations_on_real_env(ray_session):
    """A remote env runner (its own process) builds the env from the installed package."""
    returns, counts = _train(2, num_env_runners=1)
    assert len(returns) == 2 and all(np.isfinite(returns))
    assert len(counts) == 1
    turns, masked = counts[0]
    assert turns >= 2 * 256
    assert masked == 0, "a masked slot was sampled"


@pytest.mark.slow
def test_ppo_return_rises(ray_session):
    returns, _ = _train(15)
    early, late = np.mean(returns[:3]), np.mean(returns[-3:])
    assert late > early + 0.2, returns
