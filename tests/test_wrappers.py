"""BudgetWrapper and ErrorInjection: property tests over budget specs and fault schedules."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from budget_envs.wrappers import (
    BudgetWrapper,
    Choice,
    ErrorInjection,
    Fixed,
    LogUniform,
    Schedule,
    Uniform,
    parse_budget,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats
from toy_env import ToyEnv

from budget_envs.core import text_space

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Endless(gym.Env[str, str]):
    """Terminates (won) at turn ``end``, or never when ``end`` is None."""

    def __init__(self, end: int | None = None) -> None:
        self.end = end
        self.observation_space = text_space(512)
        self.action_space = text_space(64)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return "start", {"won": False}

    def step(self, action):
        self.t += 1
        done = self.end is not None and self.t >= self.end
        return f"turn {self.t}", float(done), done, False, {"won": done}


# ---------------------------------------------------------------- budget specs
small_t = st.integers(1, 40)
spec_strategy = st.one_of(
    small_t,
    st.tuples(small_t, small_t).map(lambda p: (min(p), max(p))),
    st.lists(small_t, min_size=1, max_size=5),
    st.dictionaries(small_t, st.integers(1, 5), min_size=1, max_size=4),
    st.tuples(small_t, small_t).map(lambda p: LogUniform(min(p), max(p))),
    st.tuples(small_t, small_t, st.integers(1, 4)).map(
        lambda p: Schedule({0: p[0], p[2]: (min(p[0], p[1]), max(p[0], p[1]))})
    ),
)


@SETTINGS
@given(spec=spec_strategy, end=st.one_of(st.none(), st.integers(1, 45)), seed=st.integers(0, 2**31))
def test_truncated_exactly_at_t_and_never_terminated_by_wrapper(spec, end, seed):
    env = BudgetWrapper(Endless(end), budget=spec)
    parsed = parse_budget(spec)
    for episode in range(3):
        obs, info = env.reset(seed=seed + episode)
        limit = info["budget"]["limit"]
        assert parsed.t_min <= limit <= parsed.t_max
        assert limit in parsed.pmf(episode)
        turns = 0
        while True:
            obs, reward, terminated, truncated, info = env.step("go")
            turns += 1
            assert info["budget"] == {"limit": limit, "used": turns, "remaining": limit - turns}
            if end is not None and turns == end:
                assert terminated  # only the env terminates
                assert not truncated
                break
            assert not terminated
            if turns == limit:
                assert truncated
                break
            assert not truncated
        summary = info["episode_summary"]
        assert summary["used"] == turns == min(limit, end or limit)
        assert summary["won"] == (end is not None and end <= limit)
        assert summary["first_success_turn"] == (end if summary["won"] else -1)


@pytest.mark.parametrize(
    "spec",
    [
        (3, 12),
        [4, 8, 16, 32],
        {5: 1, 10: 2, 20: 5},
        LogUniform(2, 40),
        Schedule({0: (5, 9)}),
    ],
    ids=["uniform", "list", "weighted", "loguniform", "schedule"],
)
def test_empirical_distribution_matches_spec(spec):
    env = BudgetWrapper(Endless(), budget=spec, seed=123)
    pmf = parse_budget(spec).pmf(0)
    n = 4000
    counts: dict[int, int] = {}
    for _ in range(n):
        _, info = env.reset()
        limit = info["budget"]["limit"]
        counts[limit] = counts.get(limit, 0) + 1
    assert set(counts) <= set(pmf)
    values = sorted(pmf)
    observed = np.array([counts.get(v, 0) for v in values], dtype=float)
    expected = np.array([pmf[v] * n for v in values])
    result = stats.chisquare(observed, expected)
    assert result.pvalue > 1e-3, (counts, pmf)


def test_schedule_is_a_curriculum_over_episodes():
    env = BudgetWrapper(Endless(), budget=Schedule({0: 10, 3: 20, 6: (25, 30)}), seed=0)
    limits = [env.reset()[1]["budget"]["limit"] for _ in range(9)]
    assert limits[:3] == [10, 10, 10]
    assert limits[3:6] == [20, 20, 20]
    assert all(25 <= t <= 30 for t in limits[6:])


def test_same_seed_same_budgets_and_independent_of_task_draw():
    a = BudgetWrapper(Endless(), budget=(1, 100))
    b = BudgetWrapper(Endless(), budget=(1, 100))
    la = [a.reset(seed=s)[1]["budget"]["limit"] for s in range(20)]
    lb = [b.reset(seed=s)[1]["budget"]["limit"] for s in range(20)]
    assert la == lb and len(set(la)) > 5
    # the wrapper draws from its own generator: the env's np_random is untouched
    env = ToyEnv()
    env.reset(seed=4)
    before = env.np_random.random()
    wrapped = BudgetWrapper(ToyEnv(), budget=(1, 100))
    wrapped.reset(seed=4)
    assert wrapped.unwrapped.np_random.random() == before


def test_override_budget_for_one_episode():
    env = BudgetWrapper(Endless(), budget=10, seed=0)
    _, info = env.reset(options={"budget": 2})
    assert info["budget"]["limit"] == 2
    env.step("a")
    assert env.step("a")[3] is True
    _, info = env.reset()
    assert info["budget"]["limit"] == 10
    with pytest.raises(ValueError, match="at least 1"):
        env.reset(options={"budget": 0})
    with pytest.raises(TypeError, match="'x'"):
        env.reset(options={"budget": "x"})


def test_visibility_modes():
    env = BudgetWrapper(Endless(), budget=5, visibility="remaining")
    obs, _ = env.reset(seed=0)
    assert obs == "start\n\nTurns left: 5 of 5"
    obs = env.step("a")[0]
    assert obs.endswith("Turns left: 4 of 5")
    env = BudgetWrapper(Endless(), budget=5, visibility="final_warning", warn_within=2)
    shown = [env.reset(seed=0)[0]] + [env.step("a")[0] for _ in range(5)]
    assert ["Turns left" in o for o in shown] == [False, False, False, True, True, True]
    assert shown[-1].endswith("Turns left: 0 of 5")
    env = BudgetWrapper(Endless(), budget=5, visibility="[{used}/{limit} used, {remaining} left]")
    assert env.reset()[0].endswith("[0/5 used, 0 left]".replace("0 left", "5 left"))
    env = BudgetWrapper(Endless(), budget=5)
    assert env.reset()[0] == "start" and env.step("a")[0] == "turn 1"


@pytest.mark.parametrize(
    "kwargs, exc, fragment",
    [
        ({"budget": 0}, ValueError, "0"),
        ({"budget": -3}, ValueError, "-3"),
        ({"budget": (9, 3)}, ValueError, "(9, 3)"),
        ({"budget": (1, 2, 3)}, ValueError, "(1, 2, 3)"),
        ({"budget": []}, ValueError, "at least one"),
        ({"budget": {5: -1}}, ValueError, "-1"),
        ({"budget": 2.5}, TypeError, "2.5"),
        ({"budget": "ten"}, ValueError, "'ten'"),
        ({"budget": True}, TypeError, "True"),
        (
            {"budget": Schedule.__new__(Schedule) if False else {"schedule": {3: 10}}},
            ValueError,
            "episode 0",
        ),
        ({"visibility": "loud"}, ValueError, "'loud'"),
        ({"visibility": "remaining", "template": "{nope}"}, ValueError, "{nope}"),
        ({"warn_within": 0}, ValueError, "0"),
    ],
)
def test_bad_arguments_are_quoted(kwargs, exc, fragment):
    with pytest.raises(exc) as info:
        BudgetWrapper(Endless(), **kwargs)
    assert fragment in str(info.value)


def test_string_specs():
    assert parse_budget("10") == Fixed(10)
    assert parse_budget("5..20") == Uniform(5, 20)
    assert parse_budget("5-20") == Uniform(5, 20)
    assert parse_budget("8,16,32") == Choice((8, 16, 32))
    assert parse_budget("log:4..64") == LogUniform(4, 64)
    assert parse_budget({"log_uniform": [4, 64]}) == LogUniform(4, 64)
    assert parse_budget({"schedule": [[0, 10], [5, 20]]}) == Schedule({0: 10, 5: 20})


def test_records_constructor_args():
    env = BudgetWrapper(ToyEnv(), budget=(2, 9), visibility="remaining", warn_within=2, seed=3)
    spec = env.spec  # the toy env was not made through gym.make
    assert spec is None
    # The budget is recorded in its canonical JSON form ("2..9"), which JSON cannot mistake for
    # the two-item choice [2, 9] that the tuple (2, 9) would become.
    assert env._saved_kwargs == {
        "budget": "2..9",
        "visibility": "remaining",
        "template": "Turns left: {remaining} of {limit}",
        "warn_within": 2,
        "seed": 3,
        "budget_info": True,
    }


# ---------------------------------------------------------------- fault schedules
class Counting(ToyEnv):
    """The toy env, with a count of executed (not dropped) actions."""


def _fault_turns(env, seed, turns):
    env.reset(seed=seed)
    out = []
    for t in range(1, turns + 1):
        _, _, term, _, info = env.step("look")
        if "fault" in info:
            out.append((info["fault"]["turn"], info["fault"]["kind"]))
            assert info["fault"]["turn"] == t
        assert not term
    return out


@SETTINGS
@given(
    at=st.sets(st.integers(1, 30), max_size=6),
    max_faults=st.one_of(st.none(), st.integers(0, 6)),
    seed=st.integers(0, 2**31),
    kinds=st.lists(
        st.sampled_from(["drop", "garble", "perturb"]), min_size=1, max_size=3, unique=True
    ),
)
def test_faults_fire_exactly_as_scheduled(at, max_faults, seed, kinds):
    env = ErrorInjection(
        ToyEnv(),
        kinds=kinds,
        at_turn=sorted(at) or None,
        rate=0.0,  # only the scheduled turns (kinds alone would fire at the default rate)
        max_faults=max_faults,
        seed=seed,
    )
    fired = _fault_turns(env, seed, 30)
    expected = sorted(at)[: max_faults if max_faults is not None else None]
    assert [t for t, _ in fired] == expected
    assert all(k in kinds for _, k in fired)
    assert _fault_turns(env, seed, 30) == fired  # same seed, same faults


@SETTINGS
@given(
    rate=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31),
    max_faults=st.one_of(st.none(), st.integers(0, 40)),
)
def test_rate_schedule_is_seeded_and_capped(rate, seed, max_faults):
    env = ErrorInjection(
        ToyEnv(), kinds={"drop": 1, "garble": 3}, rate=rate, max_faults=max_faults, seed=seed
    )
    first = _fault_turns(env, 0, 40)
    again = ErrorInjection(
        ToyEnv(), kinds={"drop": 1, "garble": 3}, rate=rate, max_faults=max_faults, seed=seed
    )
    assert _fault_turns(again, 0, 40) == first
    if max_faults is not None:
        assert len(first) <= max_faults
    if rate == 1.0:
        assert len(first) == (40 if max_faults is None else min(40, max_faults))
    if rate == 0.0:
        assert first == []


@pytest.mark.parametrize("faults", ["slip", ["slip", "drop"], {"kinds": "slip", "seed": 3}])
def test_faults_by_kind_alone_fire_at_the_default_rate(faults):
    """faults= given by kind without a trigger fires at the rate docs/faults.md states (read from
    the page, not from the constant under test), never silently nothing."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "faults.md").read_text()
    stated = re.search(r"fire\s+at\s+the\s+default\s+rate\s+of\s+([0-9.]+)\s+per\s+turn", page)
    assert stated, "docs/faults.md no longer states the default fault rate"
    documented = float(stated.group(1))
    env = gym.make("BudgetMix/ToolUse-v0", faults=faults, budget=20, level=1)
    assert env.get_wrapper_attr("rate") == documented
    turns = fired = 0
    for episode in range(20):
        _, info = env.reset(seed=episode)
        done = False
        while not done:
            action = (env.unwrapped.oracle_actions() or info["candidate_actions"])[0]
            *_, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            turns += 1
        fired += len(info["faults"])
    assert fired > 0
    assert stats.binomtest(fired, turns, documented).pvalue > 1e-3, (fired, turns)


def test_explicit_zero_rate_without_turns_fires_nothing():
    env = ErrorInjection(ToyEnv(), kinds="drop", rate=0.0, seed=0)
    assert _fault_turns(env, 0, 40) == []


def test_rate_matches_probability():
    env = ErrorInjection(ToyEnv(), kinds="garble", rate=0.25, seed=5)
    total = sum(len(_fault_turns(env, s, 40)) for s in range(50))
    assert stats.binomtest(total, 2000, 0.25).pvalue > 1e-3


def test_weighted_kinds():
    env = ErrorInjection(ToyEnv(), kinds={"drop": 1, "garble": 3}, rate=1.0, seed=1)
    kinds = [k for s in range(20) for _, k in _fault_turns(env, s, 40)]
    share = kinds.count("garble") / len(kinds)
    assert stats.binomtest(kinds.count("garble"), len(kinds), 0.75).pvalue > 1e-3, share


@SETTINGS
@given(
    seed=st.integers(0, 2**31),
    actions=st.lists(
        st.sampled_from(
            [
                "go east",
                "go west",
                "take key",
                "open door",
                "smash door",
                "look",
                "",
                "\x00",
                "dance",
            ]
        ),
        max_size=25,
    ),
)
def test_a_fault_never_crashes_the_env(seed, actions):
    env = BudgetWrapper(
        ErrorInjection(ToyEnv(), kinds=["slip", "drop", "garble", "perturb"], rate=0.5, seed=seed),
        budget=(5, 30),
    )
    obs, info = env.reset(seed=seed)
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.observation_space.contains(obs)
        if "fault" in info:
            f = info["fault"]
            assert set(f) == {
                "kind",
                "turn",
                "action",
                "executed",
                "effect",
                "cell",
                "cost_before",
                "cost_after",
            }
        if terminated or truncated:
            obs, info = env.reset()


def test_fault_records_measure_damage():
    env = ErrorInjection(ToyEnv(), kinds="slip", at_turn=1, seed=0)
    damage = []
    for task in range(20):
        _, info = env.reset(seed=task, options={"task_id": task})
        best = env.unwrapped.oracle_actions()[0]
        _, _, _, _, info = env.step(best)
        f = info["fault"]
        assert f["action"] == best and f["executed"] != best
        damage.append(f["cost_after"] - f["cost_before"])
    assert max(damage) >= 1  # a slip away from the optimal move costs turns
    env = ErrorInjection(ToyEnv(), kinds="drop", at_turn=2, seed=0)
    env.reset(seed=1)
    env.step("look")
    obs, _, _, _, info = env.step("look")
    assert obs == "Nothing happens." and info["fault"]["executed"] == ""
    assert info["fault"]["cost_after"] == info["fault"]["cost_before"]
    assert info["turn"] == 2


def test_garble_keeps_layout_and_state():
    env = ErrorInjection(ToyEnv(), kinds="garble", at_turn=1, seed=0)
    plain = ToyEnv()
    obs0, _ = plain.reset(seed=3)
    plain_obs = plain.step("look")[0]
    env.reset(seed=3)
    obs, _, _, _, info = env.step("look")
    assert obs != plain_obs and len(obs) == len(plain_obs)
    assert [c.isalpha() for c in obs] == [c.isalpha() for c in plain_obs]
    assert env.unwrapped.cost_to_go() == plain.cost_to_go()


def test_family_fault_replays_through_snapshot():
    env = ErrorInjection(ToyEnv(), kinds="perturb", at_turn=[1, 3], seed=2)
    env.reset(seed=8)
    for _ in range(3):
        env.step("look")
    snap = env.unwrapped.snapshot()
    room = env.unwrapped.room
    env.step("go west")
    env.step("go east")
    env.unwrapped.restore(snap)
    assert env.unwrapped.room == room


@pytest.mark.parametrize(
    "kwargs, exc, fragment",
    [
        ({"kinds": "explode"}, ValueError, "'explode'"),
        ({"kinds": []}, ValueError, "at least one"),
        ({"kinds": {"drop": -1}}, ValueError, "-1"),
        ({"at_turn": 0}, ValueError, "0"),
        ({"at_turn": [1, "2"]}, ValueError, "'2'"),
        ({"rate": 1.5}, ValueError, "1.5"),
        ({"rate": "often"}, TypeError, "'often'"),
        ({"max_faults": -1}, ValueError, "-1"),
        ({"seed": 1.5}, TypeError, "1.5"),
    ],
)
def test_error_injection_bad_arguments(kwargs, exc, fragment):
    with pytest.raises(exc) as info:
        ErrorInjection(ToyEnv(), **kwargs)
    assert fragment in str(info.value)


def test_make_with_faults_and_bad_faults():
    from contract_helpers import TOY_ID, make

    import budget_envs  # noqa: F401

    env = make(TOY_ID, faults={"kinds": "drop", "at_turn": 1, "seed": 0}, budget=4)
    env.reset(seed=0)
    assert env.step("look")[4]["fault"]["kind"] == "drop"
    with pytest.raises(TypeError, match="unknown keys"):
        make(TOY_ID, faults={"when": 3})
    with pytest.raises(ValueError, match="visibility"):
        make(TOY_ID, budget=None, visibility="remaining")
