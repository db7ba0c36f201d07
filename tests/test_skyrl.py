"""The SkyRL adapter: every registered id through skyrl-gym's own ``make`` plays exactly the
episodes of ``gymnasium.make`` (same task and seed, same actions), won, lost and budget ends,
hostile actions included; the env config and the sample's extras reach the env."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field

import numpy as np
import pytest
import skyrl_gym
from budget_envs.registry import registered_ids
from omegaconf import OmegaConf
from skyrl_gym.envs.base_text_env import BaseTextEnv

from budget_envs.integrations import skyrl
from budget_envs.integrations.common import make_env

IDS = registered_ids()
NAMES = skyrl.register()
#: Ids whose seeded random episode (seed 1, T=12, the first task) ends lost: the others have no
#: losing move there (or none at all) and run out of budget or win.
LOSES = {"BudgetMix/WebShop-v0", "BudgetMix/ToolUse-v0", "BudgetMix/TextWorld-TreasureHunter-v0"}
HOSTILE = ["", "\x00\x00", '{"tool_calls": [{"name":', "\x00{broken json"]


def _pair(env_id, config, task_id, seed):
    """The skyrl-gym env and the in-process env on the same task, seed and options."""
    env = skyrl_gym.make(
        skyrl.skyrl_name(env_id), env_config=config, extras={"task_id": task_id, "seed": seed}
    )
    kwargs = dict(config)
    kwargs.update(kwargs.pop("env_kwargs", {}))
    ref = make_env(env_id, **kwargs)
    return env, ref


def _play(env_id, config, seed, choose, turns=200):
    """Play one episode on both sides; assert every turn matches; return the stop reason."""
    probe = make_env(env_id)
    task_id = probe.unwrapped.task_ids[0]
    probe.close()
    env, ref = _pair(env_id, config, task_id, seed)
    try:
        messages, meta = env.init([])
        obs, info = ref.reset(seed=seed, options={"task_id": task_id})
        assert messages[0]["role"] == "system" and messages[-1]["role"] == "user"
        assert messages[-1]["content"].endswith(obs)
        assert meta["state_hash"] == info["state_hash"] and meta["task_id"] == task_id
        assert meta["budget"] == info["budget"] and env.max_turns == info["budget"]["limit"]
        rng = np.random.default_rng(seed)
        for turn in range(1, turns + 1):
            action = choose(ref, info, rng, turn)
            out = env.step(action)
            obs, reward, terminated, truncated, info = ref.step(action)
            assert out["observations"] == [{"role": "user", "content": obs}]
            assert out["reward"] == float(reward)
            assert out["done"] == (terminated or truncated)
            assert out["postprocessed_action"] is None
            meta = out["metadata"]
            assert meta["action"] == action and meta["turn"] == info["turn"] == turn
            assert meta["won"] == bool(info["won"])
            assert meta["stop_reason"] == info.get("stop_reason", "")
            assert meta["budget"] == info["budget"] and meta["state_hash"] == info["state_hash"]
            assert meta["fault"] == info.get("fault")
            assert meta["invalid_action"] == info["invalid_action"]
            if out["done"]:
                assert env.turns == turn <= env.max_turns
                return meta["stop_reason"], env
        raise AssertionError(f"{env_id}: no end within {turns} turns")
    finally:
        env.close()
        ref.close()


def _oracle(ref, info, rng, turn):
    best = ref.unwrapped.oracle_actions()
    return best[0] if best else info["candidate_actions"][0]


def _random(ref, info, rng, turn):
    options = info["candidate_actions"]
    assert options
    return options[int(rng.integers(len(options)))]


def _hostile(ref, info, rng, turn):
    return HOSTILE[(turn - 1) % len(HOSTILE)]


def test_register_adds_one_identifier_per_registered_id():
    assert NAMES == [skyrl.skyrl_name(i) for i in IDS] and len(set(NAMES)) == len(IDS)
    assert all(n.startswith("budgetmix_") and n.isidentifier() for n in NAMES)
    assert skyrl.register() == NAMES  # idempotent
    assert all(skyrl_gym.registry[n].kwargs == {"env_id": i} for n, i in zip(NAMES, IDS))
    assert skyrl.skyrl_name("BudgetMix/ToolUse-v0") == "budgetmix_ToolUse_v0"
    skyrl_gym.register(
        id="budgetmix_Clash_v0", entry_point=skyrl._ENTRY_POINT, kwargs={"env_id": "X/Y-v0"}
    )
    try:
        with pytest.raises(ValueError, match="already registered"):
            skyrl.register(["Other/Clash-v0"])
    finally:
        skyrl_gym.envs.registration.deregister("budgetmix_Clash_v0")


@pytest.mark.parametrize("env_id", IDS, ids=str)
def test_make_with_no_arguments_builds_the_ids_defaults(env_id):
    env = skyrl_gym.make(skyrl.skyrl_name(env_id))
    ref = make_env(env_id)
    try:
        assert isinstance(env, BaseTextEnv) and env.env.spec.kwargs == ref.spec.kwargs
        messages, meta = env.init([])
        assert meta["budget"]["limit"] == env.max_turns >= 1
        assert messages[-1]["role"] == "user" and messages[-1]["content"]
    finally:
        env.close()
        ref.close()


@pytest.mark.parametrize("env_id", IDS, ids=str)
def test_skyrl_episodes_equal_in_process_episodes(env_id):
    won, _ = _play(env_id, {}, seed=0, choose=_oracle)
    assert won == "won"
    hostile = {"budget": 4, "visibility": "remaining"}
    end, env = _play(env_id, hostile, seed=2, choose=_hostile)
    assert end == "budget" and env.invalid_actions >= 3  # empty and NUL ones in every family
    assert env.get_metrics()["stop_budget"] == 1.0 and env.get_metrics()["won"] == 0.0
    random_end, _ = _play(env_id, {"budget": 12}, seed=1, choose=_random)
    assert (random_end == "lost") == (env_id in LOSES), random_end
    faulty = {"budget": 6, "faults": {"kinds": "drop", "at_turn": 2, "seed": 0}}
    _play(env_id, faulty, seed=3, choose=_random)


def test_faults_reach_metadata():
    env = skyrl_gym.make(
        "budgetmix_ToolUse_v0",
        env_config={"faults": {"kinds": "drop", "at_turn": 2, "seed": 0}},
        extras={"seed": 5},
    )
    _, info = env.init([])
    faults = []
    for _ in range(3):
        out = env.step('{"tool_calls": [{"name": "list_promotions", "arguments": {}}]}')
        faults.append(out["metadata"]["fault"])
    assert faults[0] is None and faults[2] is None
    assert faults[1]["kind"] == "drop" and faults[1]["turn"] == 2
    assert env.get_metrics()["faults"] == 1


def test_a_prompts_samples_play_one_task_under_one_budget():
    extras = {"task_id": "L2-00007", "seed": 11, "max_turns": 100}
    config = {"budget": (3, 30)}
    a = skyrl_gym.make("budgetmix_ToolUse_v0", env_config=config, extras=dict(extras))
    b = skyrl_gym.make("budgetmix_ToolUse_v0", env_config=config, extras=dict(extras))
    ma, meta_a = a.init([{"role": "user", "content": "hello"}])
    mb, meta_b = b.init([{"role": "user", "content": "hello"}])
    assert ma == mb and meta_a == meta_b and meta_a["task_id"] == "L2-00007"
    assert ma[1] == {"role": "user", "content": "hello"}  # the prompt is kept, a system first
    limits = set()
    for seed in range(8):
        c = skyrl_gym.make(
            "budgetmix_ToolUse_v0", env_config=config, extras={**extras, "seed": seed}
        )
        limits.add(c.init([])[1]["budget"]["limit"])
    assert len(limits) > 1  # the seed draws T
    # extra_info (SkyRL's usual column for row details) is read too
    d = skyrl_gym.make(
        "budgetmix_ToolUse_v0", env_config=config, extras={"extra_info": dict(extras)}
    )
    assert d.init([])[1] == meta_a


@dataclass
class _TypedConfig:  # a config dataclass, as SkyRL's typed configs are
    budget: object = field(default_factory=lambda: [5, 7])
    visibility: str = "remaining"
    faults: object = None
    env_kwargs: dict = field(default_factory=lambda: {"level": 2})


@pytest.mark.parametrize(
    "config",
    [
        OmegaConf.create({"budget": [5, 7], "visibility": "remaining", "env_kwargs": {"level": 2}}),
        {"budget": [5, 7], "visibility": "remaining", "env_kwargs": {"level": 2}},
        _TypedConfig(),
    ],
    ids=["omegaconf", "dict", "dataclass"],
)
def test_env_config_is_read_from_omegaconf_dicts_and_dataclasses(config):
    env = skyrl_gym.make("budgetmix_ToolUse_v0", env_config=config, extras={"seed": 0})
    messages, meta = env.init([])
    assert meta["budget"]["limit"] in (5, 7) and meta["task_id"].startswith("L2-")
    assert messages[-1]["content"].endswith(f"Turns left: {env.max_turns} of {env.max_turns}")


def test_bad_config_and_extras_raise_typed_errors_that_quote_them():
    with pytest.raises(TypeError, match="bugdet"):
        skyrl_gym.make("budgetmix_ToolUse_v0", env_config={"bugdet": 5})
    with pytest.raises(ValueError, match="needs a budget"):
        skyrl_gym.make("budgetmix_ToolUse_v0", env_config={"budget": None})
    with pytest.raises(TypeError, match="'x'"):
        skyrl_gym.make("budgetmix_ToolUse_v0", extras={"seed": "x"})
    with pytest.raises(TypeError, match="env_kwargs"):
        skyrl_gym.make("budgetmix_ToolUse_v0", env_config={"env_kwargs": [1]})


def test_replies_are_parsed_and_a_step_after_done_plays_nothing():
    env = skyrl_gym.make("budgetmix_ToolUse_v0", env_config={"budget": 2}, extras={"seed": 0})
    _, meta = env.init([])
    call = '{"tool_calls": [{"name": "list_promotions", "arguments": {}}]}'
    out = env.step(f"<think>promotions first</think>\n{call}")
    assert out["metadata"]["action"] == call and not out["metadata"]["invalid_action"]
    out = env.step("<think>never closed")
    assert out["done"] and out["metadata"]["action"] == "" and out["metadata"]["invalid_action"]
    after = env.step(call)
    assert after["done"] and after["observations"] == [] and after["reward"] == 0.0
    assert after["metadata"] == out["metadata"] and env.turns == 2
    metrics = env.get_metrics()
    assert metrics == {
        "won": 0.0,
        "turns": 2,
        "budget": 2,
        "return": 0.0,
        "invalid_actions": 1,
        "faults": 0,
        "stop_budget": 1.0,
    }
    assert BaseTextEnv.aggregate_metrics([metrics, metrics])["turns"] == 2


def test_a_skyrl_max_turns_below_the_budget_is_logged_once(caplog, monkeypatch):
    monkeypatch.setattr(skyrl, "_warned_max_turns", False)
    with caplog.at_level(logging.WARNING, logger=skyrl.__name__):
        for _ in range(2):
            env = skyrl_gym.make("budgetmix_ToolUse_v0", extras={"max_turns": 1})
            env.init([])
    assert len(caplog.records) == 1 and "max_turns (1)" in caplog.records[0].getMessage()


def test_import_budget_envs_never_imports_skyrl_gym_and_the_module_names_its_extra():
    script = textwrap.dedent(
        """
        import json, sys
        import budget_envs
        out = {"imported": "skyrl_gym" in sys.modules}
        sys.modules["skyrl_gym"] = None
        try:
            import budget_envs.integrations.skyrl
        except Exception as exc:
            out["raised"] = type(exc).__name__
            out["message"] = str(exc)
        print(json.dumps(out))
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["imported"] is False and out["raised"] == "DependencyNotInstalled"
    assert '".[skyrl]"' in out["message"]
