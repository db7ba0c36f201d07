"""The shared helpers: one cache rule, one dependency error, one tool-call text."""

from __future__ import annotations

import sys

import gymnasium as gym
import pytest

from budget_envs import _util
from budget_envs.envs.alfworld import default_cache_dir
from budget_envs.envs.textworld import generate as tw_gen
from budget_envs.envs.tooluse.tools import call_json, parse_action


def test_cache_rule_is_the_same_for_every_family(monkeypatch, tmp_path):
    monkeypatch.setenv("BUDGET_ENVS_CACHE", str(tmp_path / "root"))
    assert _util.cache_root("x") == tmp_path / "root" / "x"
    assert default_cache_dir() == tmp_path / "root" / "alfworld"
    assert tw_gen.cache_root() == tmp_path / "root" / "textworld"
    monkeypatch.delenv("BUDGET_ENVS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "budget-envs" / "alfworld"
    assert tw_gen.cache_root() == tmp_path / "xdg" / "budget-envs" / "textworld"
    with pytest.raises(ValueError, match="'a/b'"):
        _util.cache_root("a/b")


def test_missing_dependency_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    from budget_envs.eval import report

    with pytest.raises(gym.error.DependencyNotInstalled, match=r"budget-envs\[plots\]"):
        report._figure_module()
    with pytest.raises(gym.error.DependencyNotInstalled, match=r"the Ray back end.*\[ray\]"):
        monkeypatch.setitem(sys.modules, "ray", None)
        _util.require("ray", extra="ray", what="the Ray back end")


def test_one_tool_call_text_for_agents_and_the_oracle():
    from budget_envs.eval.agents import tool_call_action

    args = {"order_id": "ord_0123abcd", "reason": None}
    assert tool_call_action("cancel_order", args) == call_json("cancel_order", args)
    assert call_json("cancel_order", tuple(args.items())) == call_json("cancel_order", args)
    assert parse_action(tool_call_action("get_order", {"order_id": "ord_0123abcd"})) == (
        "get_order",
        {"order_id": "ord_0123abcd"},
    )
    two = _util.tool_calls_action([("a", {"x": 1}), ("b", "{broken")])
    assert (
        two
        == '{"tool_calls":[{"name":"a","arguments":{"x":1}},{"name":"b","arguments":"{broken"}]}'
    )


def test_one_tool_call_text_is_exactly_the_json_form():
    import random

    from budget_envs._util import tool_call_action, tool_calls_action

    rng = random.Random(0)
    alphabet = ["a", '"', "\\", "\n", "\x00", "é", "中", "\u2028", "😀", " ", "/", "\t", "\x7f"]

    def text(n):
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, n)))

    for _ in range(3000):
        args = {text(5): rng.choice([None, text(8)]) for _ in range(rng.randint(0, 4))}
        name = text(6) or "x"
        assert tool_call_action(name, args) == tool_calls_action([(name, args)]), (name, args)
    # non-string arguments and raw strings take the general path
    assert tool_call_action("f", {"n": 3}) == '{"tool_calls":[{"name":"f","arguments":{"n":3}}]}'
    assert tool_call_action("f", "{broken") == tool_calls_action([("f", "{broken")])


def test_tool_call_templates_write_exactly_what_json_encoding_writes():
    """Calls whose values are strings are written from per-name templates: the same text as
    encoding them whole, for names and values holding %, quotes, NUL and non-ASCII, None (left
    out) and non-string values mixed in."""
    import random

    from budget_envs._util import tool_call_action, tool_calls_action

    rnd = random.Random(0)
    for _ in range(5000):
        name = rnd.choice(["get_order", "x%y", 'q"', "ünï"])
        keys = rnd.sample(["order_id", "k%2", 'k"4', "é", "note"], rnd.randint(0, 3))
        args = {k: rnd.choice([None, "v", "%s", 'a"b', "ünï", "\x00", 3, 2.5]) for k in keys}
        assert tool_call_action(name, args) == tool_calls_action([(name, args)]), (name, args)
