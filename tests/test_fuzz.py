"""Hypothesis fuzzing of every registered id: generated actions never raise, an invalid action
leaves the state as it was, and every observation stays inside the observation space.

Each example resets to one of the first two tasks, plays a drawn number of oracle moves (so the
fuzzed states vary), then steps a run of generated actions: arbitrary Unicode (lone surrogates
included), sizes up to 1 MB and around the length limit, JSON of any shape (tool-call shaped
ones with the env's real tool names too), near-grammar mutations of the admissible actions,
game-system and meta commands, and values that are not text at all.

After an invalid turn the state must be untouched. Without a ``state_hash`` info key the state
is read from everything the contract exposes: the oracle's cost-to-go and actions, the
admissible set, the rest of ``info`` (score, won, lost, goal), and the env's snapshot (its
native payload, e.g. the web shop's server-side session, or its replay trace).

In CI the profile in ``conftest.py`` makes Hypothesis derandomized with no deadline.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
import warnings

import gymnasium as gym
import numpy as np
import pytest
from budget_envs.registry import registered_ids
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budget_envs.info import CORE_KEYS

IDS = registered_ids()

#: Generated actions per id in the default run; the slow run plays FUZZ_SLOW.
FUZZ_ACTIONS = 500
FUZZ_SLOW = 2000
#: Actions per example (one reset and oracle prefix per example).
PER_EXAMPLE = 5

META = [
    "look",
    "l",
    "inventory",
    "i",
    "help",
    "quit",
    "q",
    "restart",
    "save",
    "restore",
    "undo",
    "score",
    "verbose",
    "brief",
    "script",
    "unscript",
    "version",
    "wait",
    "z",
    "again",
    "g",
    "oops",
    "tree",
    "purloin key",
    "abstract key to me",
    "gonear kitchen",
    "showme",
    "actions",
    "rules",
    "scope",
    "trace 5",
    "#comment",
    "*comment",
    "/reset",
    "reset()",
    "exit",
    "admissible",
    "goal",
    "> look",
    "look; take key",
    "look. look. look.",
    "go north then go south",
    "search[]",
    "click[]",
    "click[< prev]",
    "click[back to search]",
    "click[buy now]",
    "search[" + "a" * 3000 + "]",
    "buy",
    "submit",
    "submit_answer",
]

_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
json_values = st.recursive(
    _json_leaf,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


def _dump(value) -> str:
    # allow_nan: NaN and Infinity are not JSON, which is exactly the kind of input we want
    return json.dumps(value, allow_nan=True)


unicode_text = st.text(max_size=200) | st.builds(
    lambda a, b: a + "\ud800" + b, st.text(max_size=20), st.text(max_size=20)
)
sized = st.builds(
    lambda unit, n: (unit * n)[:n],
    st.text(min_size=1, max_size=8),
    st.integers(0, 64) | st.integers(4000, 4200) | st.integers(0, 2**20),
)
not_text = st.sampled_from([None, 0, 42, -1.5, b"go north", bytearray(b"look"), ["look"], {}])


@st.composite
def tool_calls(draw, tools: list[str]):
    name = draw(st.sampled_from(tools) | st.text(max_size=12))
    args = draw(json_values | st.text(max_size=40).map(lambda s: "{" + s))
    shape = draw(st.integers(0, 3))
    if shape == 0:
        return _dump({"tool_calls": [{"name": name, "arguments": args}]})
    if shape == 1:
        return _dump({"name": name, "arguments": args})
    if shape == 2:
        calls = [{"name": name, "arguments": args}] * draw(st.integers(0, 40))
        return _dump({"tool_calls": calls})
    return _dump([{"function": {"name": name, "arguments": _dump(args)}}])


@st.composite
def near_grammar(draw, admissible: list[str]):
    base = draw(st.sampled_from(admissible))
    words = base.split()
    how = draw(st.integers(0, 9))
    if how == 0:
        return base.upper()
    if how == 1:
        return "  " + base.replace(" ", "   ") + "  "
    if how == 2:
        return base[:-1]
    if how == 3:
        return base + draw(st.sampled_from(["]", "[", "]]", " ]", "\\", "'", '"', ")", "}"]))
    if how == 4:
        return " ".join(words[:-1] + [draw(st.text(min_size=1, max_size=12))])
    if how == 5:
        return " ".join(reversed(words))
    if how == 6:
        return base + " " + draw(st.sampled_from(admissible))
    if how == 7:
        return base + "\n" + draw(st.sampled_from(admissible))
    if how == 8:
        return base.replace("[", "(").replace("]", ")")
    return words[0] + draw(st.sampled_from([" ", "[", " the ", " 99 ", ""])) + draw(unicode_text)


@st.composite
def mutated_call(draw, action: str):
    """A tool-call action with one argument changed, dropped or added (near the grammar)."""
    call = json.loads(action)["tool_calls"][0]
    args = dict(call["arguments"]) if isinstance(call.get("arguments"), dict) else {}
    how = draw(st.integers(0, 2))
    if how == 0 and args:
        args[draw(st.sampled_from(sorted(args)))] = draw(json_values)
    elif how == 1 and args:
        del args[draw(st.sampled_from(sorted(args)))]
    else:
        args[draw(st.text(max_size=10))] = draw(json_values)
    return _dump({"tool_calls": [{"name": call["name"], "arguments": args}]})


def actions(info: dict, oracle: list[str]):
    """The action strategy for the state ``info`` describes (``oracle``: its oracle actions)."""
    parts = [
        unicode_text,
        sized,
        json_values.map(_dump),
        st.sampled_from(META),
        not_text,
    ]
    admissible = [a for a in info.get("admissible_actions") or [] if isinstance(a, str) and a]
    if admissible or oracle:
        parts.append(near_grammar(admissible + oracle))
    if oracle:
        parts.append(st.sampled_from(oracle))  # a real move now and then: the states vary
    calls = [a for a in oracle if a.startswith('{"tool_calls"')]
    if calls:
        parts.append(st.sampled_from(calls).flatmap(mutated_call))
    tools = [t["function"]["name"] for t in info.get("tools") or [] if "function" in t]
    if tools or info.get("tools") is not None:
        parts.append(tool_calls(tools or ["no_tool"]))
    return st.one_of(parts)


def _canonical(value, depth: int = 0):
    """A comparable form of a snapshot payload: containers, bytes and arrays by value, a SQLite
    database by its dump, other objects by their attributes (a few levels deep)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, sqlite3.Connection):
        dump = value.serialize() if hasattr(value, "serialize") else "\n".join(value.iterdump())
        return hashlib.sha256(dump if isinstance(dump, bytes) else dump.encode()).hexdigest()
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return value.item()
    if depth > 6:
        return type(value).__name__
    if isinstance(value, dict):
        return tuple(sorted((repr(k), _canonical(v, depth + 1)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_canonical(v, depth + 1) for v in value)
    if isinstance(value, (set, frozenset)):
        return tuple(sorted(repr(_canonical(v, depth + 1)) for v in value))
    if dataclasses.is_dataclass(value):
        return (type(value).__name__,) + tuple(
            (f.name, _canonical(getattr(value, f.name), depth + 1))
            for f in dataclasses.fields(value)
        )
    if hasattr(value, "__dict__"):
        return (type(value).__name__, _canonical(vars(value), depth + 1))
    return type(value).__name__


def _state(env) -> tuple:
    """Everything the contract shows of the state (what an invalid turn must not change)."""
    unwrapped = env.unwrapped
    info = unwrapped.current_info()
    if "state_hash" in info:
        return (info["state_hash"],)
    snap = unwrapped.snapshot()
    visible = {k: v for k, v in info.items() if k not in ("turn", "invalid_action")}
    return (
        unwrapped.cost_to_go(),
        sorted(unwrapped.oracle_actions()),
        json.dumps(visible, sort_keys=True, default=repr),
        snap.task_id,
        snap.trace,
        snap.done,
        _canonical(snap.payload),
    )


_ENVS: dict[str, gym.Env] = {}


def _env(env_id: str) -> gym.Env:
    # One env per id for the whole module: Hypothesis calls the body many times, and the text
    # games' first reset loads the game files.
    if env_id not in _ENVS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _ENVS[env_id] = gym.make(env_id)
    return _ENVS[env_id]


@pytest.fixture(scope="module", autouse=True)
def _close_envs():
    yield
    for env in _ENVS.values():
        env.close()
    _ENVS.clear()


def fuzz(env_id: str, total: int) -> dict[str, int]:
    """Run ``total`` generated actions on ``env_id``; returns what was played."""
    env = _env(env_id)
    unwrapped = env.unwrapped
    seen = {"actions": 0, "invalid": 0, "non_text": 0, "examples": 0}

    @settings(
        max_examples=total // PER_EXAMPLE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(
        task=st.integers(0, 1),
        seed=st.integers(0, 2**16),
        prefix=st.integers(0, 3),
        data=st.data(),
    )
    def body(task, seed, prefix, data):
        seen["examples"] += 1
        obs, info = env.reset(seed=seed, options={"task_id": task})
        for _ in range(prefix):
            best = unwrapped.oracle_actions()
            if not best:
                break
            obs, _, terminated, truncated, info = env.step(best[0])
            if terminated or truncated:
                obs, info = env.reset(seed=seed, options={"task_id": task})
        for _ in range(PER_EXAMPLE):
            action = data.draw(actions(info, unwrapped.oracle_actions()), label="action")
            before = _state(env)
            obs, reward, terminated, truncated, info = env.step(action)
            seen["actions"] += 1
            seen["non_text"] += not isinstance(action, str)
            assert isinstance(obs, str) and obs.strip(), "every turn gets some feedback"
            assert env.observation_space.contains(obs)
            assert len(obs) <= env.observation_space.max_length
            assert set(CORE_KEYS) <= set(info)
            if not isinstance(action, str):
                assert info["invalid_action"]
            if info["invalid_action"]:
                seen["invalid"] += 1
                assert reward == 0.0 and not terminated
                assert _state(env) == before, f"invalid action {action!r:.200} changed the state"
            if terminated or truncated:
                obs, info = env.reset(seed=seed, options={"task_id": task})

    body()
    return seen


def _check(seen: dict[str, int], total: int) -> None:
    assert seen["actions"] >= total, seen
    # The mix reaches both sides: rejected input and turns the family played.
    assert 0 < seen["invalid"] < seen["actions"], seen
    assert seen["non_text"] > 0, seen


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_fuzzed_actions_never_raise_and_invalid_ones_change_nothing(env_id):
    _check(fuzz(env_id, FUZZ_ACTIONS), FUZZ_ACTIONS)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_fuzzed_actions_long_run(env_id):
    _check(fuzz(env_id, FUZZ_SLOW), FUZZ_SLOW)
