"""Packed scoring: the module computes only the offered rows, with the same numbers as scoring
every slot (the path before packing, ``model_config["packed"] = False``).

States come from seeded random play of every registered id, so states with one action, many
actions and (for tool use) more than a hundred sit in one batch with all-padding rows beside them.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from budget_envs.registry import registered_ids
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from budget_envs.integrations import rllib as rl

IDS = [i for i in registered_ids() if i.startswith("BudgetMix/")]
SIZES = {"obs_dim": 128, "goal_dim": 32, "hist_dim": 32, "vocab": 1024}


def _states(env_id: str, n: int, seed: int = 0) -> tuple[rl.MaskedTextEnv, list[dict]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = rl.MaskedTextEnv(env_id, budget=15, max_actions=512, **SIZES)
    rng = np.random.default_rng(seed)
    states = []
    obs, _ = env.reset(seed=seed)
    while len(states) < n:
        states.append(obs)
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(max(len(env.commands), 1))))
        if terminated or truncated:
            obs, _ = env.reset()
    return env, states


def _module(env: rl.MaskedTextEnv, packed: bool):
    torch.manual_seed(0)
    return RLModuleSpec(
        module_class=rl.ActionScoringTorchModule,
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config={"hidden": 32, "embed": 16, "packed": packed},
    ).build()


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_packed_log_probs_and_gradients_equal_scoring_every_slot(env_id):
    env, states = _states(env_id, 24)
    try:
        packed, dense = _module(env, True), _module(env, False)
        dense.load_state_dict(packed.state_dict())
        batch = {k: torch.as_tensor(np.stack([s[k] for s in states])) for k in states[0]}
        offered = batch["action_mask"] > 0.5
        counts = offered.sum(1)
        assert counts.min() >= 1 and int(counts.max()) < 512, counts
        assert len(set(counts.tolist())) > 1, "every state offers the same count: no padding mix"
        outs = {}
        for name, module in (("packed", packed), ("dense", dense)):
            module.zero_grad()
            logits = module.forward_train({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
            logp = torch.log_softmax(logits.double(), dim=-1)
            taken = torch.multinomial(
                offered.double(), 1, generator=torch.Generator().manual_seed(1)
            )
            loss = -logp.gather(1, taken).mean() + module.compute_values({Columns.OBS: batch}).sum()
            loss.backward()
            grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
            outs[name] = (logits.detach(), logp.detach(), grads)
        (lp, logp_p, g_p), (ld, logp_d, g_d) = outs["packed"], outs["dense"]
        assert torch.all(lp[~offered] <= -1e8) and torch.all(ld[~offered] <= -1e8)
        assert torch.max(torch.abs(logp_p[offered] - logp_d[offered])) <= 1e-6
        assert set(g_p) == set(g_d) and g_p
        for name in g_p:
            assert torch.allclose(g_p[name], g_d[name], atol=1e-6, rtol=1e-4), name
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("runners", [0, 2], ids=["driver", "remote-runners"])
def test_slots_grow_when_a_state_offers_more_than_the_policy_has(tmp_path, runners):
    """``max_actions=8`` on ToolUse level 1 (states offer up to ~140 actions): training does not
    die, it grows its slots, carries its weights over and ends; the policy then plays states with
    more actions than it was ever given slots for. With remote env runners too (RLlib ends a
    runner whose env raises without passing the error on)."""
    import json

    from budget_envs.eval.agents import make_agent
    from budget_envs.integrations.rllib.training import read_metrics, train

    out = tmp_path / "p"
    train(
        "BudgetMix/ToolUse-v0",
        budget=12,
        env_kwargs={"level": 1},
        out_dir=out,
        iterations=2,
        max_actions=8,
        train_batch_size=256,
        minibatch_size=128,
        warm_start_episodes=2,
        warm_start_epochs=1,
        num_env_runners=runners,
    )
    meta = json.loads((out / "policy.json").read_text())
    assert meta["settings"]["num_env_runners"] == runners
    grown = meta.get("slots_grown") or []
    assert grown and grown[0]["iteration"] == 1, meta
    assert meta["features"]["max_actions"] == grown[-1]["to"] > 8
    assert [int(r["iteration"]) for r in read_metrics(out)] == [1, 2]

    import gymnasium as gym

    # A policy folder that says 8 slots still plays states with many more actions (eval scores
    # exactly the offered rows).
    meta["features"]["max_actions"] = 8
    (out / "policy.json").write_text(json.dumps(meta))
    agent = make_agent(f"policy:{out}")
    env = gym.make("BudgetMix/ToolUse-v0", budget=12, level=1)
    most = 0
    try:
        for seed in range(10):
            obs, info = env.reset(seed=seed)
            hidden = {k: v for k, v in info.items() if k != "budget"}
            agent.reset(env_id="BudgetMix/ToolUse-v0", observation=obs, info=hidden, seed=seed)
            done = False
            while not done:
                most = max(most, len(info["candidate_actions"]))
                action = agent.act(obs, {k: v for k, v in info.items() if k != "budget"})
                assert action in info["candidate_actions"]
                obs, _, terminated, truncated, info = env.step(action)
                done = terminated or truncated
    finally:
        env.close()
    assert most > 8, most
