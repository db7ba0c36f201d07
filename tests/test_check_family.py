"""``budget_envs.contract.check_family``: every registered id keeps the family contract, a family
that breaks a rule is told which rule and what is missing, and the toy family of
docs/extending.md passes it as the page writes it (the test runs the page's code blocks)."""

from __future__ import annotations

import itertools
import re
import sys
import types
import unicodedata
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from budget_envs.registry import entry_for, registered_ids, unregister_env
from contract_helpers import QUICK_KWARGS, TOY_ID, make
from toy_env import ToyEnv

from budget_envs.contract import RULES, ContractWarning, check_family
from budget_envs.core import FaultOutcome, TextAgentEnv
from budget_envs.errors import ActionRejected, ContractViolation

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extending.md"
WALKTHROUGH = "## A toy family, step by step"
RULES_SECTION = "## The family rules"
IDS = registered_ids()
PRODUCT_IDS = registered_ids(include_extra=False)
SMALL = {"tasks_per_level": 3}


def _quick_kwargs(env_id: str) -> dict:
    """Small task lists: the quick settings of tests/contract_helpers.py, two tasks per level."""
    kwargs = dict(QUICK_KWARGS.get(entry_for(env_id).family, {}))
    if env_id in PRODUCT_IDS:
        kwargs.setdefault("tasks_per_level", 2)
    return kwargs


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def _slug(title: str) -> str:
    """Python-Markdown's default heading anchor (MkDocs' toc)."""
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


# ---------------------------------------------------------------------- every registered id
@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_every_registered_id_keeps_the_family_contract(env_id):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ContractWarning)
        report = check_family(env_id, env_kwargs=_quick_kwargs(env_id))
    warned = [w for w in caught if issubclass(w.category, ContractWarning)]
    assert report.ok, report
    always = {r.id for r in RULES.values() if not r.when and not r.advisory}
    assert always <= set(report.passed), sorted(always - set(report.passed))
    if env_id in PRODUCT_IDS:  # a product family has every part: every rule ran and held
        assert set(report.passed) == set(RULES) and not warned, report
    else:  # the test-only toy takes no split=: the advisory rule warns, nothing fails
        assert env_id == TOY_ID
        assert [f.rule for f in report.warnings] == ["splits.accepted"]
        assert len(warned) == 1 and "[splits.accepted]" in str(warned[0].message)


def test_the_registry_has_product_ids_and_the_toy():
    assert len(PRODUCT_IDS) >= 4 and TOY_ID in IDS


# ---------------------------------------------------------------------- the docs' toy family
@pytest.fixture(scope="module")
def lamps():
    """The classes the code blocks of the walkthrough define, run in order in one module."""
    blocks = re.findall(r"```python\n(.*?)```", _section(PAGE.read_text(), WALKTHROUGH), re.S)
    assert len(blocks) >= 3, "the walkthrough lost its code blocks"
    module = types.ModuleType("docs_extending_walkthrough")
    sys.modules[module.__name__] = module
    try:
        for number, block in enumerate(blocks, start=1):
            exec(compile(block, f"{PAGE}: walkthrough block {number}", "exec"), module.__dict__)
        yield module.__dict__
    finally:
        sys.modules.pop(module.__name__, None)
        if "Tutorial/Lamps-v0" in registered_ids():
            unregister_env("Tutorial/Lamps-v0")


def test_the_docs_toy_family_passes_check_family(lamps):
    assert lamps["LampsEnv"].__module__ == "docs_extending_walkthrough"
    assert issubclass(lamps["LampsEnv"], TextAgentEnv)
    for name in ("LampsEnv", "FlickeringLampsEnv"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ContractWarning)
            report = check_family(lamps[name], env_kwargs=SMALL, raise_on_fail=False)
        assert report.ok and not report.findings, report
    faulty = check_family(lamps["FlickeringLampsEnv"], env_kwargs=SMALL)
    assert set(faulty.passed) == set(RULES)  # its own fault kind brings faults.hook in
    plain = check_family(lamps["LampsEnv"], env_kwargs=SMALL)
    assert set(RULES) - set(plain.passed) == {"faults.hook"}  # family faults are optional
    registered = check_family("Tutorial/Lamps-v0", env_kwargs={"level": 1, "tasks_per_level": 2})
    assert registered.env == "Tutorial/Lamps-v0" and registered.ok


def test_the_docs_name_their_toy_apart_from_the_plugin_test_family(lamps):
    plugin = (ROOT / "tests" / "test_family_plugin.py").read_text()
    taken = set(re.findall(r'family="(\w+)"', plugin))
    assert taken, "tests/test_family_plugin.py registers no family any more"
    page = PAGE.read_text()
    assert entry_for("Tutorial/Lamps-v0").family == "Lamps" and "Lamps" not in taken
    assert not any(f'family="{name}"' in page for name in taken), taken


def test_the_rules_tables_list_every_rule_in_its_section():
    text = _section(PAGE.read_text(), RULES_SECTION)
    anchors = {
        _slug(h): body
        for h, body in re.findall(r"^### ([^\n]+)\n(.*?)(?=^### |\Z)", text, re.S | re.M)
    }
    rows = re.findall(r"^\| `([\w.]+)` \|", text, re.M)
    assert sorted(rows) == sorted(RULES), "a rule is missing from the tables, or listed twice"
    for rule in RULES.values():
        assert rule.section in anchors, f"no section #{rule.section} for {rule.id}"
        row = f"| `{rule.id}` | {rule.what} | {rule.required} |"
        assert row in anchors[rule.section], row


def test_the_docs_example_message_is_the_real_one(lamps):
    page = _section(PAGE.read_text(), RULES_SECTION)
    example = " ".join(re.search(r"```text\n(.*?)```", page, re.S).group(1).split())
    broken = type("LampsEnv", (lamps["LampsEnv"],), {"_goal": TextAgentEnv._goal})
    with pytest.raises(ContractViolation) as exc:
        check_family(broken, env_kwargs=SMALL)
    assert str(exc.value) == example


# ---------------------------------------------------------------------- a family breaking a rule
# Each mixin, put in front of a class of the docs' walkthrough, breaks one rule.
_RESETS = itertools.count()
_FLICKERS = itertools.count()


def _without(*names):
    """A mixin that takes the hooks ``names`` away (back to the base class's)."""
    return type("Without", (), {n: TextAgentEnv.__dict__[n] for n in names})


class _ResetSkipped:
    def oracle_actions(self):  # an override that forgets self._require_reset()
        return self._oracle_actions()


class _ResetWithoutOptions:
    def reset(self, *, seed=None):
        return super().reset(seed=seed)


class _DiscreteSpace:
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observation_space = gym.spaces.Discrete(3)


class _TaskTwice:
    @property
    def task_ids(self):
        return self._ids + self._ids[:1]


class _SomeLevels:
    def task_level(self, task_id):
        return None if task_id.endswith("000") else 1


class _NoOracleMove:
    def _oracle_actions(self):
        return []


class _CostOffByOne:
    def _cost_to_go(self):
        return super()._cost_to_go() + 1


class _NoGoalKey:
    def current_info(self, invalid=False):
        return {k: v for k, v in super().current_info(invalid).items() if k != "goal"}


class _Extra:
    """``_extra_info`` returns ``extra`` (a callable of the env)."""

    extra = None

    def _extra_info(self):
        return type(self).extra(self)


def _extra(make):
    return type("Extra", (_Extra,), {"extra": staticmethod(make)})


class _RaisesOnBadInput:
    def _execute(self, action):
        if " ".join(action.lower().split()) not in self._admissible():
            raise ValueError(f"cannot parse {action[:20]!r}")
        return super()._execute(action)


class _RejectsLate:
    def _execute(self, action):
        self.lit ^= 1  # a change before the refusal
        if " ".join(action.lower().split()) not in self._admissible():
            raise ActionRejected("Unknown action.")
        self.lit ^= 1
        return super()._execute(action)


class _CountsResets:
    def _state_digest(self):  # a number that is not drawn from the task or a seeded generator
        self.__dict__.setdefault("visit", next(_RESETS))
        return f"{super()._state_digest()}|{self.visit}"


class _KeepsOpen:
    def close(self):
        return None  # forgets super().close()


class _BadNativeSnapshot:
    native_snapshot = True

    def _snapshot_state(self):
        return (self.n, self.lit, self.goal)

    def _restore_state(self, payload):
        self.n, self.lit, self.goal = payload
        self.lit ^= 1  # restores another state


class _NoDigest:
    def _state_digest(self):
        return None


class _NoCells:
    family_fault_cells = {}


class _FaultCrashes:
    def _fault(self, kind, rng, action):
        raise RuntimeError("the flicker broke")


class _FaultNotFromRng:
    def _fault(self, kind, rng, action):
        obs, reward, invalid = self._attempt(action)
        self.lit ^= 1 << (next(_FLICKERS) % self.n)  # not from rng: a replay flips another lamp
        return FaultOutcome(obs, "world", None if invalid else action, reward, invalid)


class _HoldoutIsTrain:
    def __init__(self, *, split="train", **kwargs):
        super().__init__(split="train" if split == "holdout" else split, **kwargs)


class _IdsWithoutSplit:
    @property
    def task_ids(self):
        return [t.split("/", 1)[1] for t in self._ids]

    def task_identity(self, task_id):
        return self._tasks[f"{self.split}/{task_id}"]

    def _load(self, task_id):
        return super()._load(f"{self.split}/{task_id}")


class _SameTasksEverywhere:
    def __init__(self, *, split="train", **kwargs):
        super().__init__(split="train", **kwargs)
        self._tasks = {f"{split}/{k.split('/', 1)[1]}": v for k, v in self._tasks.items()}
        self._ids = list(self._tasks)


class _TestTasksHaveNoGoal:
    def _goal(self):
        return "" if self.split == "test" else super()._goal()


#: rule id -> (the walkthrough's class, the mixin that breaks the rule, the message's pattern).
MUTANTS = {
    "hooks.task_ids": ("LampsEnv", _without("task_ids"), r"hook task_ids is missing"),
    "hooks.load": ("LampsEnv", _without("_load"), r"hook _load is missing \(_load\(task_id\)"),
    "hooks.execute": ("LampsEnv", _without("_execute"), r"hook _execute is missing"),
    "hooks.goal": ("LampsEnv", _without("_goal"), r"hook _goal is missing \(_goal\(\) -> str"),
    "hooks.admissible": ("LampsEnv", _without("_admissible"), r"hook _admissible is missing"),
    "hooks.oracle_actions": (
        "LampsEnv",
        _without("_oracle_actions"),
        r"_oracle_actions is missing",
    ),
    "hooks.cost_to_go": ("LampsEnv", _without("_cost_to_go"), r"hook _cost_to_go is missing"),
    "hooks.state_digest": ("LampsEnv", _without("_state_digest"), r"hook _state_digest is missing"),
    "hooks.oracle_exact": (
        "LampsEnv",
        type("Exact", (), {"oracle_exact": "yes"}),
        r"oracle_exact must be True or False, got 'yes'",
    ),
    "hooks.require_reset": (
        "LampsEnv",
        _ResetSkipped,
        r"oracle_actions\(\) before reset\(\) raised AttributeError.*not gymnasium\.error\.Reset",
    ),
    "hooks.task_identity": (
        "LampsEnv",
        _without("task_identity"),
        r"takes split= but task_identity\(task_id\) -> tuple is missing",
    ),
    "gymnasium.check_env": (
        "LampsEnv",
        _ResetWithoutOptions,
        r"raised Error: The `reset` method does not provide an `options`",
    ),
    "spaces.text": ("LampsEnv", _DiscreteSpace, r"observation_space is Discrete\(3\), not a Text"),
    "tasks.ids": ("LampsEnv", _TaskTwice, r"task_ids lists a task twice"),
    "tasks.level": ("LampsEnv", _SomeLevels, r"task_level\(\) is None for 3 of 9"),
    "oracle.nonempty": ("LampsEnv", _NoOracleMove, r"oracle_actions\(\) is \[\] after reset"),
    "oracle.wins": ("LampsEnv", _CostOffByOne, r"the exact oracle took \d+ turns, cost_to_go\(\)"),
    "info.core_keys": ("LampsEnv", _NoGoalKey, r"info after reset .* lacks \['goal'\]"),
    "info.documented": (
        "LampsEnv",
        _extra(lambda env: {"lamps": 3}),
        r"holds \['lamps'\], not documented in budget_envs/info.py",
    ),
    "info.types": (
        "LampsEnv",
        _extra(lambda env: {"score": "full"}),
        r"info\['score'\] .* is 'full', not <class 'float'>",
    ),
    "candidates.list": (
        "LampsEnv",
        _extra(lambda env: {"candidate_actions": [1, 2]}),
        r"a candidate .* is not a str",
    ),
    "candidates.oracle": (
        "LampsEnv",
        _extra(lambda env: {"candidate_actions": ["look"]}),
        r"no candidate of \['look'\] is an oracle action",
    ),
    "candidates.playable": (
        "LampsEnv",
        _extra(lambda env: {"candidate_actions": ["dance", *env._admissible()]}),
        r"candidate 'dance' is invalid",
    ),
    "bad_input.turn": (
        "LampsEnv",
        _RaisesOnBadInput,
        r"raised ValueError: cannot parse .*; in _execute, raise ActionRejected instead",
    ),
    "bad_input.state": ("LampsEnv", _RejectsLate, r"invalid step\(.*\) changed the state"),
    "determinism.seed": ("LampsEnv", _CountsResets, r"two fresh envs differ from transcript line"),
    "lifecycle.close": (
        "LampsEnv",
        _KeepsOpen,
        r"step\(\) after close\(\) did not raise EnvClosed",
    ),
    "snapshots.round_trip": (
        "LampsEnv",
        _BadNativeSnapshot,
        r"restore\(\) did not bring back the hash, cost-to-go and actions",
    ),
    "digest.stable": ("LampsEnv", _NoDigest, r"info\['state_hash'\] .* is None, not 32 hex digits"),
    "faults.cells": ("FlickeringLampsEnv", _NoCells, r"fault kind 'flicker' without a valid cell"),
    "faults.hook": (
        "FlickeringLampsEnv",
        _without("_fault"),
        r"fault_kinds\(\) lists \['flicker'\] but _fault\(\) is missing",
    ),
    "faults.arm": ("FlickeringLampsEnv", _FaultCrashes, r"raised RuntimeError: the flicker broke"),
    "faults.replay": (
        "FlickeringLampsEnv",
        _FaultNotFromRng,
        r"restore\(\) after a 'flicker' fault did not bring the state back",
    ),
    "splits.unknown": ("LampsEnv", _HoldoutIsTrain, r"split='holdout' was accepted"),
    "splits.ids_disjoint": ("LampsEnv", _IdsWithoutSplit, r"splits test and train share task ids"),
    "splits.content_disjoint": (
        "LampsEnv",
        _SameTasksEverywhere,
        r"share task identities \(the same task under other ids\)",
    ),
    "splits.plays": ("LampsEnv", _TestTasksHaveNoGoal, r"a test task has no goal"),
}
ADVISORY = sorted(r.id for r in RULES.values() if r.advisory)


def _broken(lamps, rule_id):
    base, mixin, _ = MUTANTS[rule_id]
    return type(f"Broken{base}", (mixin, lamps[base]), {})


def test_every_required_rule_has_a_family_that_breaks_it():
    assert set(MUTANTS) | set(ADVISORY) == set(RULES)
    assert ADVISORY == ["splits.accepted"]


@pytest.mark.parametrize("rule_id", sorted(MUTANTS))
def test_a_family_that_breaks_a_rule_is_told_the_rule_and_what_is_wrong(lamps, rule_id):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContractWarning)
        report = check_family(_broken(lamps, rule_id), env_kwargs=SMALL, raise_on_fail=False)
    assert not report.ok
    messages = [f.message for f in report.failures if f.rule == rule_id]
    assert messages, f"{rule_id} not broken; the report says:\n{report}"
    pattern = MUTANTS[rule_id][2]
    assert any(re.search(pattern, m) for m in messages), messages
    section = f"See docs/extending.md#{RULES[rule_id].section}"
    assert messages[0].startswith(f"[{rule_id}] Broken") and messages[0].endswith(section)
    assert rule_id not in report.passed


HOOKS = sorted(r for r, (_, mixin, _) in MUTANTS.items() if mixin.__name__ == "Without")


@pytest.mark.parametrize("rule_id", HOOKS)
def test_a_missing_hook_raises_at_once_naming_it(lamps, rule_id):
    with pytest.raises(ContractViolation, match=re.escape(f"[{rule_id}] ")) as exc:
        check_family(_broken(lamps, rule_id), env_kwargs=SMALL)
    assert exc.value.rule == rule_id and re.search(MUTANTS[rule_id][2], str(exc.value))
    assert isinstance(exc.value, AssertionError) and isinstance(exc.value, gym.error.Error)


def test_a_family_without_splits_is_warned_not_failed():
    with pytest.warns(ContractWarning, match=r"^\[splits\.accepted\] ToyEnv: the constructor"):
        report = check_family(ToyEnv)
    assert report.ok and [f.rule for f in report.warnings] == ["splits.accepted"]
    assert not any(r.startswith("splits.") for r in report.passed)
    assert any(line.startswith("splits.*") for line in report.not_run)


def test_a_missing_hook_names_itself_when_the_env_runs(lamps):
    env = _broken(lamps, "hooks.goal")(**SMALL)
    with pytest.raises(NotImplementedError, match=r"required hook _goal\(\) -> str"):
        env.reset(seed=0)


def test_the_oracle_template_does_the_bookkeeping(lamps):
    env = lamps["LampsEnv"](**SMALL)
    with pytest.raises(gym.error.ResetNeeded):
        env.oracle_actions()
    with pytest.raises(gym.error.ResetNeeded):
        env.cost_to_go()
    env.reset(seed=0)
    while not env.done:
        env.step(env.oracle_actions()[0])
    assert env.oracle_actions() == [] and env.cost_to_go() == 0
    assert env.task_level(env.task_ids[0]) in (1, 2, 3)
    assert TextAgentEnv.task_level(env, env.task_ids[0]) is None  # the optional hook's default


def test_check_family_takes_an_id_a_class_or_an_env():
    env = make("BudgetMix/ToolUse-v0", level=1, tasks_per_level=2)  # the wrapped stack
    report = check_family(env, env_kwargs={"level": 1, "tasks_per_level": 2})
    assert report.env == "ToolUseEnv" and report.ok
    env.close()
    with pytest.raises(TypeError, match="got 42"):
        check_family(42)
