"""The trainer integrations build envs exactly like ``gymnasium.make`` (one builder, one budget rule)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from budget_envs.registry import DEFAULT_BUDGET, entry_for, registered_ids
from budget_envs.wrappers import BudgetWrapper
from contract_helpers import TOY_ID

from budget_envs.integrations import common, rllib, trl


def _budget_wrappers(env: gym.Env) -> list[BudgetWrapper]:
    out = []
    while isinstance(env, gym.Wrapper):
        if isinstance(env, BudgetWrapper):
            out.append(env)
        env = env.env
    return out


def _make(env_id, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(env_id, **kwargs)


def test_one_builder_for_both_trainers():
    assert trl.make_env is common.make_env and rllib.make_env is common.make_env
    assert trl.make_env_like is common.make_env_like


@pytest.mark.parametrize("env_id", registered_ids())
def test_budget_means_the_same_as_in_gym_make(env_id):
    default = common.make_env(env_id)
    bare = common.make_env(env_id, budget=None)
    fixed = common.make_env(env_id, budget=7)
    try:
        wrappers = _budget_wrappers(default)
        assert len(wrappers) == 1
        assert wrappers[0]._saved_kwargs["budget"] == entry_for(env_id).default_budget
        assert _budget_wrappers(bare) == [] and _budget_wrappers(_make(env_id, budget=None)) == []
        assert [w._saved_kwargs["budget"] for w in _budget_wrappers(fixed)] == [7]
        assert default.spec.kwargs == _make(env_id, visibility="hidden").spec.kwargs
        assert bare.spec.kwargs == _make(env_id, budget=None, visibility="hidden").spec.kwargs
    finally:
        for env in (default, bare, fixed):
            env.close()


def test_masked_env_follows_the_same_rule():
    masked_default = rllib.MaskedTextEnv(TOY_ID)
    masked_bare = rllib.MaskedTextEnv(TOY_ID, budget=None)
    assert len(_budget_wrappers(masked_default.env)) == 1
    assert _budget_wrappers(masked_bare.env) == []
    _, info = masked_bare.env.reset(seed=0)
    assert "budget" not in info
    obs, _ = masked_bare.reset(seed=0)
    assert obs["action_mask"].sum() >= 1


def test_default_budget_sentinel_is_one_object():
    import pickle

    assert pickle.loads(pickle.dumps(DEFAULT_BUDGET)) is DEFAULT_BUDGET
    assert repr(DEFAULT_BUDGET) == "DEFAULT_BUDGET"
