"""Budget specs survive JSON: every spec form, through ``EnvSpec.to_json`` and back, on every id."""

from __future__ import annotations

import json

import numpy as np
import pytest
from budget_envs.registry import registered_ids
from budget_envs.wrappers import (
    BudgetWrapper,
    Choice,
    Fixed,
    LogUniform,
    Schedule,
    Uniform,
    parse_budget,
)
from budget_envs.wrappers.budget_spec import budget_to_json
from contract_helpers import TOY_ID, make
from gymnasium.envs.registration import EnvSpec

#: (name, what a user passes as budget=, the spec it means, its canonical JSON form)
FORMS = [
    ("int", 7, Fixed(7), 7),
    ("string-int", "7", Fixed(7), 7),
    ("tuple-range", (3, 9), Uniform(3, 9), "3..9"),
    ("string-range", "3..9", Uniform(3, 9), "3..9"),
    ("two-item-list", [3, 9], Choice((3, 9)), [3, 9]),
    ("list", [4, 8, 16], Choice((4, 8, 16)), [4, 8, 16]),
    ("string-list", "4,8,16", Choice((4, 8, 16)), [4, 8, 16]),
    ("repeated-list", [4, 4, 16], Choice((4, 4, 16)), [4, 4, 16]),
    ("weighted", {8: 1, 32: 3}, Choice((8, 32), (1, 3)), {"8": 1, "32": 3}),
    ("weighted-float", {5: 0.1, 6: 0.3}, Choice((5, 6), (0.1, 0.3)), {"5": 0.1, "6": 0.3}),
    ("weighted-json", {"8": 1, "32": 3}, Choice((8, 32), (1, 3)), {"8": 1, "32": 3}),
    ("log-uniform", LogUniform(4, 64), LogUniform(4, 64), "log:4..64"),
    ("log-string", "log:4..64", LogUniform(4, 64), "log:4..64"),
    ("log-mapping", {"log_uniform": [4, 64]}, LogUniform(4, 64), "log:4..64"),
    (
        "schedule",
        Schedule({0: 10, 3: (20, 30), 6: {8: 1, 32: 3}}),
        Schedule({0: 10, 3: (20, 30), 6: {8: 1, 32: 3}}),
        {"schedule": {"0": 10, "3": "20..30", "6": {"8": 1, "32": 3}}},
    ),
    (
        "schedule-mapping",
        {"schedule": [[0, "log:4..8"], [2, [5, 6]]]},
        Schedule({0: LogUniform(4, 8), 2: [5, 6]}),
        {"schedule": {"0": "log:4..8", "2": [5, 6]}},
    ),
]
FORM_IDS = [f[0] for f in FORMS]
IDS = registered_ids()
EPISODES = 9  # covers every stage of the schedules above


def _wrapper(env) -> BudgetWrapper:
    while not isinstance(env, BudgetWrapper):
        env = env.env
    return env


def _draws(spec, seed: int = 11, n: int = 300) -> list[int]:
    rng = np.random.default_rng(seed)
    return [spec.sample(rng, episode % EPISODES) for episode in range(n)]


@pytest.mark.parametrize(("name", "given", "meant", "canonical"), FORMS, ids=FORM_IDS)
def test_canonical_form_reads_back_to_an_equal_spec(name, given, meant, canonical):
    spec = parse_budget(given)
    assert spec == meant
    assert spec.to_json() == canonical
    assert budget_to_json(given) == canonical
    # The canonical form is plain JSON: it survives a dump/load unchanged and parses back equal.
    assert json.loads(json.dumps(canonical)) == canonical
    again = parse_budget(json.loads(json.dumps(canonical)))
    assert again == spec
    assert [again.pmf(e) for e in range(EPISODES)] == [spec.pmf(e) for e in range(EPISODES)]
    assert _draws(again) == _draws(spec)


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
@pytest.mark.parametrize(("name", "given", "meant", "canonical"), FORMS, ids=FORM_IDS)
def test_env_spec_json_round_trip_keeps_the_distribution(env_id, name, given, meant, canonical):
    env = make(env_id, budget=given, visibility="remaining")
    text = env.spec.to_json()
    assert json.loads(text)["kwargs"]["budget"] == canonical
    again = make(EnvSpec.from_json(text))
    try:
        first, second = _wrapper(env), _wrapper(again)
        assert second.budget_spec == first.budget_spec == meant
        for episode in range(EPISODES):
            assert second.budget_spec.pmf(episode) == first.budget_spec.pmf(episode)
        assert _draws(second.budget_spec) == _draws(first.budget_spec)
        assert second.visibility == "remaining"
        # And once more: the rebuilt env's spec is the same JSON, so the trip can be repeated.
        assert again.spec.to_json() == text
    finally:
        env.close()
        again.close()


@pytest.mark.parametrize(("name", "given", "meant", "canonical"), FORMS, ids=FORM_IDS)
def test_round_tripped_env_draws_the_same_limits_on_reset(name, given, meant, canonical):
    env = make(TOY_ID, budget=given, faults={"kinds": "slip", "rate": 0.2, "seed": 1})
    again = make(EnvSpec.from_json(env.spec.to_json()))
    limits = {id(env): [], id(again): []}
    for e in (env, again):
        e.reset(seed=5)
        limits[id(e)].append(e.get_wrapper_attr("limit"))
        for _ in range(EPISODES - 1):
            e.reset()
            limits[id(e)].append(e.get_wrapper_attr("limit"))
    assert limits[id(env)] == limits[id(again)]
    assert all(t in meant.pmf(i) for i, t in enumerate(limits[id(env)]))
    env.close()
    again.close()


def test_a_tuple_is_a_range_and_a_two_item_list_a_choice():
    env = make(TOY_ID, budget=(5, 20))
    assert _wrapper(make(EnvSpec.from_json(env.spec.to_json()))).budget_spec == Uniform(5, 20)
    env = make(TOY_ID, budget=[5, 20])
    assert _wrapper(make(EnvSpec.from_json(env.spec.to_json()))).budget_spec == Choice((5, 20))


def test_wrapper_applied_by_hand_round_trips_too():
    # budget=None gives the bare env; the hand-made BudgetWrapper is an additional wrapper.
    env = BudgetWrapper(make(TOY_ID, budget=None), budget={8: 1, 32: 3}, visibility="remaining")
    text = env.spec.to_json()
    assert json.loads(text)["kwargs"]["budget"] is None
    again = make(EnvSpec.from_json(text))
    assert _wrapper(again).budget_spec == Choice((8, 32), (1, 3))
    assert again.spec.to_json() == text


def test_yaml_config_forms_parse():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load(
        "a: 5..20\nb: {8: 1, 32: 3}\nc: [8, 16]\nd: log:4..64\n"
        "e: {schedule: {0: 10, 500: 20..30}}\nf: 12\n"
    )
    assert parse_budget(config["a"]) == Uniform(5, 20)
    assert parse_budget(config["b"]) == Choice((8, 32), (1, 3))
    assert parse_budget(config["c"]) == Choice((8, 16))
    assert parse_budget(config["d"]) == LogUniform(4, 64)
    assert parse_budget(config["e"]) == Schedule({0: 10, 500: (20, 30)})
    assert parse_budget(config["f"]) == Fixed(12)


@pytest.mark.parametrize(
    ("bad", "exc", "fragment"),
    [
        ({"x": 1}, TypeError, "'x'"),
        ({"schedule": {"one": 5}}, ValueError, "'one'"),
        ({"8": -1}, ValueError, "-1"),
        ("5..", ValueError, "'5..'"),
    ],
)
def test_bad_json_forms_are_quoted(bad, exc, fragment):
    with pytest.raises(exc) as info:
        parse_budget(bad)
    assert fragment in str(info.value)
