"""One spec for faults: gymnasium.make, ErrorInjection and --faults accept the same keys."""

from __future__ import annotations

import inspect

import gymnasium as gym
import pytest
from budget_envs.wrappers import FAULT_KEYS, ErrorInjection, FaultSpec, parse_faults

import budget_envs  # noqa: F401  (registers the ids)
from budget_envs.commands.common import parse_faults as cli_faults
from budget_envs.errors import UsageError


def test_fault_keys_are_error_injections_parameters():
    params = list(inspect.signature(ErrorInjection.__init__).parameters)
    assert params[:2] == ["self", "env"]
    assert list(FAULT_KEYS) == params[2:]


@pytest.mark.parametrize(
    "key, value",
    [
        ("kinds", ["slip"]),
        ("cells", ["silent"]),
        ("at_turn", 1),
        ("rate", 0.5),
        ("max_faults", 1),
        ("seed", 3),
    ],
)
def test_make_accepts_every_key_error_injection_accepts(key, value):
    env = gym.make("BudgetMix/ToolUse-v0", level=1, faults={key: value})
    bare = gym.make("BudgetMix/ToolUse-v0", level=1, budget=None).unwrapped
    direct = ErrorInjection(bare, **{key: value})
    try:
        made = env.env
        while not isinstance(made, ErrorInjection):
            made = made.env
        assert made.kinds == direct.kinds
        env.reset(seed=0)
        env.step('{"tool_calls": [{"name": "list_promotions", "arguments": {}}]}')
    finally:
        env.close()
        direct.close()


def test_cells_select_the_same_kinds_through_make_and_the_wrapper():
    env = gym.make("BudgetMix/ToolUse-v0", level=1, faults={"cells": ["permanent"]})
    made = env.env
    while not isinstance(made, ErrorInjection):
        made = made.env
    direct = ErrorInjection(
        gym.make("BudgetMix/ToolUse-v0", level=1, budget=None).unwrapped, cells=["permanent"]
    )
    assert made.kinds == direct.kinds and made.kinds
    env.close()
    direct.close()


@pytest.mark.parametrize(
    "value, expected",
    [
        ("slip", FaultSpec(kinds="slip")),
        ("slip, drop", FaultSpec(kinds=["slip", "drop"])),
        (["slip"], FaultSpec(kinds=["slip"])),
        ({"cells": ["silent"], "rate": 0.2}, FaultSpec(cells=["silent"], rate=0.2)),
    ],
)
def test_every_spelling_parses_to_one_spec(value, expected):
    spec = parse_faults(value)
    assert spec == expected
    assert parse_faults(spec.to_json()) == spec
    assert parse_faults(spec) is spec


def test_no_faults_and_bad_faults():
    assert parse_faults(None) is None and parse_faults(False) is None
    with pytest.raises(TypeError, match="unknown keys \\['cell'\\]"):
        gym.make("BudgetMix/ToolUse-v0", faults={"cell": ["silent"]})
    with pytest.raises(TypeError, match="expects None"):
        parse_faults(3)
    with pytest.raises(TypeError, match="at least one"):
        parse_faults(" , ")


def test_cli_faults_take_the_same_keys():
    assert cli_faults('{"cells": ["silent"], "seed": 2}') == {"cells": ["silent"], "seed": 2}
    assert cli_faults("slip,drop") == ["slip", "drop"]
    with pytest.raises(UsageError, match="unknown keys"):
        cli_faults('{"kind": "slip"}')
