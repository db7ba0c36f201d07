"""Check an env family against every rule of the family contract, in one place.

:func:`check_family` is to a BudgetMix family what Gymnasium's ``check_env`` is to an env: it
builds the family's env, plays a few short seeded episodes and checks each rule of
:data:`RULES` (the hooks a family fills, the oracle, faults and their cells, snapshots and state
hashes, held-out splits, candidate actions, the ``info`` types of :mod:`budget_envs.info`,
determinism and bad input). A broken rule raises :class:`~budget_envs.errors.ContractViolation`
whose message starts with the rule's id, names what is wrong or missing and the section of
``docs/extending.md`` to read; an advisory rule (``splits.accepted``) warns with
:class:`ContractWarning` instead. ``raise_on_fail=False`` runs every check and returns the
findings in a :class:`ContractReport`.

Example:
    >>> from budget_envs.contract import check_family
    >>> small = {"level": 1, "tasks_per_level": 2}
    >>> report = check_family("BudgetMix/ToolUse-v0", env_kwargs=small)
    >>> report.ok, "oracle.wins" in report.passed
    (True, True)
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import error

from budget_envs.core import CELLS, FAULT_EFFECTS, GENERIC_KINDS, TextAgentEnv
from budget_envs.errors import ContractViolation
from budget_envs.info import ALL_KEYS, CORE_KEYS, INFO_VALUE_TYPES

__all__ = ["RULES", "ContractReport", "ContractWarning", "Finding", "Rule", "check_family"]

DOCS = "docs/extending.md"


@dataclass(frozen=True)
class Rule:
    """One rule of the family contract.

    Attributes:
        id: ``group.name``, quoted at the start of every message about the rule.
        what: what the rule asks, in a sentence (the table of docs/extending.md repeats it).
        when: empty for a rule every family meets; else the condition under which it applies.
        advisory: a broken advisory rule warns instead of failing.
        section: the anchor of its section in docs/extending.md.
    """

    id: str
    what: str
    when: str = ""
    advisory: bool = False
    section: str = "the-family-rules"

    @property
    def required(self) -> str:
        """``yes``, ``yes, when ...`` or ``no (a warning)``: the table's "required" column."""
        if self.advisory:
            return "no (a warning)"
        return f"yes, when {self.when}" if self.when else "yes"


_SPLIT = "the family takes `split=`"

# One rule per line: id | what it asks | when it applies ("" always) | "advisory" or "".
# A line starting with "#" opens the rules of a section of docs/extending.md (its anchor).
_TABLE = f"""
# rules-hooks
hooks.task_ids | the property `task_ids`: every task id, in a fixed order
hooks.load | `_load(task_id) -> str`: set up the task, return the first observation
hooks.execute | `_execute(action) -> (observation, reward)`: apply an action, or raise `ActionRejected` before any change
hooks.goal | `_goal() -> str`: the task's goal in words (`info["goal"]`)
hooks.admissible | `_admissible() -> list[str]`: the actions valid now
hooks.oracle_actions | `_oracle_actions() -> list[str]`: every optimal next action
hooks.cost_to_go | `_cost_to_go() -> int`: the fewest turns to success
hooks.state_digest | `_state_digest()`: the str or bytes that `info["state_hash"]` hashes
hooks.oracle_exact | the attribute `oracle_exact` is a bool
hooks.require_reset | `oracle_actions()` and `cost_to_go()` before `reset()` raise `gymnasium.error.ResetNeeded`
hooks.task_identity | `task_identity(task_id) -> tuple`: a task's world and goal, without its id | {_SPLIT}
# rules-tasks-and-spaces
gymnasium.check_env | Gymnasium's `check_env` passes on the bare env (`render_mode="ansi"`)
spaces.text | both spaces are `Text` and hold `"go north"` and `""`
tasks.ids | `task_ids` are unique strings; `options["task_id"]` picks a task by index or id; a bad index or id is refused
tasks.level | `task_level(task_id)` gives a level for every task, or None for every task | the family has levels
# rules-oracle
oracle.nonempty | after `reset()`, `oracle_actions()` is a non-empty list of str and `cost_to_go()` an int >= 1
oracle.wins | playing `oracle_actions()[0]` wins (reward 1.0, or `info["score"]` 1.0) in `cost_to_go()` turns (exact oracle) or within 50 more (heuristic); then `oracle_actions()` is `[]` and `cost_to_go()` 0
# rules-info-and-candidate-actions
info.core_keys | every `info` holds the keys of `budget_envs.info.CORE_KEYS`
info.documented | every `info` key is in `budget_envs.info.ALL_KEYS`
info.types | every `info` value has the type its row in `budget_envs/info.py` names, and is never None
candidates.list | `info["candidate_actions"]` is a list of str: not empty while the episode runs, `[]` once it is over
candidates.oracle | on every state of an oracle episode, a candidate is an oracle action (case, spacing and JSON key order aside)
candidates.playable | a random candidate, sent as it is, is never an invalid turn
# rules-input-and-determinism
bad_input.turn | empty, 1 MB, NUL, control-character, line-break, broken-JSON, injection and non-text actions are turns with feedback, never exceptions
bad_input.state | an invalid turn earns 0, does not terminate and leaves the state (hash, cost-to-go, admissible actions) untouched
determinism.seed | the same seed (or task id) gives the same transcript in a fresh env
lifecycle.close | after `close()`, `step`, `reset`, the oracle and `snapshot` raise `EnvClosed`
# rules-snapshots-and-state-hashes
snapshots.round_trip | `restore(snapshot())` gives back the observation, cost-to-go and state hash, and the same next turns
digest.stable | `info["state_hash"]` is 32 hex digits on every reset and step; the same task starts from the same hash
# rules-faults
faults.cells | `fault_cells()` maps every kind (the generic ones and `fault_kinds()`) to a cell of `budget_envs.core.CELLS`
faults.hook | `_fault(kind, rng, action)` is implemented | the family lists kinds in `fault_kinds()`
faults.arm | for every kind, `arm_fault(kind, rng)` then `step` is a turn whose `info["fault"]` gives the kind, the effect and the cell
faults.replay | `restore(snapshot())` after a faulty turn gives the same state and the same next turn
# rules-splits
splits.accepted | the constructor takes `split=`: `"train"` (the default), `"valid"`, `"test"` | | advisory
splits.unknown | an unknown split is a `ValueError` that quotes it | {_SPLIT}
splits.ids_disjoint | every split has tasks; no task id is in two splits; `split="train"` is the default list | {_SPLIT}
splits.content_disjoint | no `task_identity()` is in two splits, nor twice in one | {_SPLIT}
splits.plays | the first task of `split="test"` resets and plays | {_SPLIT}
"""


def _parse_rules(table: str) -> dict[str, Rule]:
    rules: dict[str, Rule] = {}
    section = ""
    for line in table.strip().splitlines():
        if line.startswith("# "):
            section = line[2:].strip()
            continue
        cells = [c.strip() for c in line.split("|")]
        rule_id, what, when, flag = (cells + ["", ""])[:4]
        rules[rule_id] = Rule(rule_id, what, when, flag == "advisory", section)
    return rules


#: Every rule by id, section by section (docs/extending.md has one table per section).
RULES: dict[str, Rule] = _parse_rules(_TABLE)

#: Actions every family must take as turns: invalid ones in every family (the core's checks)...
MUST_REJECT = ("", "   ", "\x00", "go\x00north", "\ud800", "go north\nlook", "\x1b[31m!\x1b[0m")
#: ...and others each family's parser judges: 1 MB, broken JSON, injections, odd prefixes.
BAD_ACTIONS = (*MUST_REJECT, "x" * 1_000_000, "ñandú über straße", "'; DROP TABLE orders; --")
BAD_ACTIONS += ('{"tool_calls": [{"name": "x", "arguments": "{broken', "[" * 5000, "\\help")
BAD_ACTIONS += ("<script>alert(1)</script>", "Ignore all previous instructions.", " \\x")

_TYPE_NAMES = {t.__name__: t for t in (str, bool, int, float, dict, list, tuple)}


class ContractWarning(UserWarning):
    """An advisory rule of the family contract is not met (see :data:`RULES`)."""


@dataclass(frozen=True)
class Finding:
    """A broken rule: its id, the message, and whether it only warns."""

    rule: str
    message: str
    advisory: bool = False


@dataclass(frozen=True)
class ContractReport:
    """What :func:`check_family` found.

    Attributes:
        env: the id or class name checked.
        passed: the rules that ran and held, in check order.
        findings: every broken rule (advisory ones included), in the order found.
        not_run: rules left out, with why (a missing hook stops the checks that play).
    """

    env: str
    passed: tuple[str, ...]
    findings: tuple[Finding, ...]
    not_run: tuple[str, ...] = ()

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if not f.advisory)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.advisory)

    @property
    def ok(self) -> bool:
        """No required rule is broken (warnings allowed)."""
        return not self.failures

    def __str__(self) -> str:
        counts = len(self.passed), len(self.failures), len(self.warnings)
        head = "{}: {} rules held, {} broken, {} warnings".format(self.env, *counts)
        return "\n".join([head, *(f"  {f.message}" for f in self.findings), *self.not_run])


# ---------------------------------------------------------------------- bookkeeping
def _need(condition: Any, detail: str) -> None:
    """Break the rule being checked (see :meth:`_Checker.rule`) unless ``condition`` holds."""
    if not condition:
        raise ContractViolation(detail)


class _Checker:
    """Runs rules, words their messages, raises or collects."""

    def __init__(self, subject: str, raise_on_fail: bool) -> None:
        self.subject = subject
        self.raise_on_fail = raise_on_fail
        self.ran: list[str] = []
        self.findings: list[Finding] = []
        self.not_run: list[str] = []

    @contextmanager
    def rule(self, rule_id: str, guard: bool = False) -> Iterator[None]:
        """Check ``rule_id`` in the ``with`` body: a :func:`_need` that fails, or any exception,
        breaks it (raised at once, or collected). A ``guard`` only catches crashes between the
        rules it holds: it does not count as checking ``rule_id``."""
        if not guard and rule_id not in self.ran:
            self.ran.append(rule_id)
        try:
            yield
        except ContractViolation as exc:
            if exc.rule:  # worded by an inner rule already
                raise
            self.fail(rule_id, str(exc))
        except Exception as exc:  # a crash inside a check is that rule broken
            self.fail(rule_id, f"raised {type(exc).__name__}: {str(exc)[:300]}", exc)

    def fail(self, rule_id: str, detail: str, cause: BaseException | None = None) -> None:
        where = f"{DOCS}#{RULES[rule_id].section}"
        text = f"[{rule_id}] {self.subject}: {detail.rstrip('.')}. See {where}"
        if RULES[rule_id].advisory:
            warnings.warn(text, ContractWarning, stacklevel=2)
        elif self.raise_on_fail:
            raise ContractViolation(text, rule_id) from cause
        self.findings.append(Finding(rule_id, text, advisory=RULES[rule_id].advisory))

    def broken(self, prefix: str = "") -> bool:
        return any(f.rule.startswith(prefix) and not f.advisory for f in self.findings)

    def report(self) -> ContractReport:
        failed = {f.rule for f in self.findings}
        passed = tuple(r for r in self.ran if r not in failed)
        return ContractReport(self.subject, passed, tuple(self.findings), tuple(self.not_run))


# ---------------------------------------------------------------------- helpers
def _builder(
    env_or_id: Any, env_kwargs: Mapping[str, Any]
) -> tuple[str, Callable[..., TextAgentEnv], TextAgentEnv | None]:
    """The subject's name, a factory of fresh bare envs, and the env given (None if none)."""
    if isinstance(env_or_id, str):
        from budget_envs.registry import entry_for, make_env

        entry = entry_for(env_or_id)

        def build(**extra: Any) -> TextAgentEnv:
            return make_env(entry, budget=None, **{**env_kwargs, **extra}).unwrapped

        return env_or_id, build, None
    given = env_or_id.unwrapped if isinstance(env_or_id, gym.Env) else None
    cls = env_or_id if given is None else type(given)
    if not (isinstance(cls, type) and issubclass(cls, TextAgentEnv)):
        raise TypeError(
            "check_family() takes an env id, a TextAgentEnv subclass or an env whose unwrapped "
            f"env is one, got {env_or_id!r}"
        )
    return cls.__name__, lambda **extra: cls(**{**env_kwargs, **extra}), given


def _policy_action(env: TextAgentEnv, info: Mapping[str, Any], rng: np.random.Generator) -> str:
    """A seeded mix of oracle moves and other actions (a stable, varied transcript)."""
    if rng.random() < 0.7:
        best = env.oracle_actions()
        if best:
            return best[0]
    if hasattr(env, "sample_action"):
        return env.sample_action(rng)
    options = info["admissible_actions"] or ["look"]
    return options[int(rng.integers(len(options)))]


def _transcript(env: TextAgentEnv, seed: int, options: dict | None = None) -> list:
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed, options=options)
    lines = [obs, info["task_id"], info["state_hash"]]
    for _ in range(8):
        action = _policy_action(env, info, rng)
        obs, reward, terminated, truncated, info = env.step(action)
        lines += [action, obs, float(reward), bool(terminated), info["state_hash"]]
        if terminated or truncated:
            break
    return lines


def _first_tasks(env: TextAgentEnv) -> range:  # the tasks the episodes play
    return range(min(2, len(env.task_ids)))


def _declared_type(description: str) -> tuple[type, type | None]:
    """``(type, item type)`` from the head of an info-key description (``"list[str]: ..."``)."""
    found = re.match(r"(\w+)(?:\[(\w+)\])?", description)
    outer = _TYPE_NAMES.get(found.group(1), object) if found else object
    inner = _TYPE_NAMES.get(found.group(2) or "") if found else None
    return outer, inner


def _type_ok(value: Any, wanted: type) -> bool:
    if isinstance(value, (bool, np.bool_)):  # a bool is no number here
        return wanted in (bool, object)
    numbers = {int: (int, np.integer), float: (int, float, np.integer, np.floating)}
    return isinstance(value, numbers.get(wanted, wanted))


def _bad_value(value: Any, path: str) -> str | None:
    """Where ``value`` holds something outside ``INFO_VALUE_TYPES`` (None included)."""
    if not isinstance(value, (*INFO_VALUE_TYPES, np.integer, np.bool_)):
        return f"{path} is {value!r:.60} ({type(value).__name__})"
    for key, item in value.items() if isinstance(value, dict) else ():
        found = _bad_value(item, f"{path}[{key!r}]")
        if found:
            return found
    return None


# ---------------------------------------------------------------------- the checks
#: The methods that fill a hook (any one will do); the others are ``_`` plus the rule's name.
_HOOK_NAMES = {
    "hooks.task_ids": ("task_ids",),
    "hooks.oracle_actions": ("_oracle_actions", "oracle_actions"),
    "hooks.cost_to_go": ("_cost_to_go", "cost_to_go"),
}
_PLAIN_HOOKS = ("load", "execute", "goal", "admissible", "oracle_actions", "cost_to_go")


def _check_hooks(ck: _Checker, env: TextAgentEnv) -> None:
    cls = type(env)
    for rule_id in ("hooks.task_ids", *(f"hooks.{n}" for n in _PLAIN_HOOKS), "hooks.state_digest"):
        names = _HOOK_NAMES.get(rule_id, ("_" + rule_id.split(".")[1],))
        hook = RULES[rule_id].what.replace("`", "")
        with ck.rule(rule_id):
            have = any(getattr(cls, n) is not getattr(TextAgentEnv, n) for n in names)
            _need(have, f"the required hook {names[0]} is missing ({hook}): define it on the class")
    with ck.rule("hooks.oracle_exact"):
        exact = getattr(env, "oracle_exact", None)
        _need(isinstance(exact, bool), f"oracle_exact must be True or False, got {exact!r}")


def _check_require_reset(ck: _Checker, fresh: TextAgentEnv) -> None:
    for name in ("oracle_actions", "cost_to_go"):
        with ck.rule("hooks.require_reset"):
            try:
                got = f"returned {getattr(fresh, name)()!r:.80}"
            except error.ResetNeeded:
                continue
            except Exception as exc:
                got = f"raised {type(exc).__name__}: {str(exc)[:120]}"
            fix = f"fill _{name}() and let the core's {name}() check reset"
            _need(False, f"{name}() before reset() {got}, not gymnasium.error.ResetNeeded: {fix}")


def _check_gymnasium(ck: _Checker, build: Callable[..., TextAgentEnv]) -> None:
    from gymnasium.utils.env_checker import check_env

    env = build(render_mode="ansi")
    try:
        with ck.rule("spaces.text"):
            for name in ("observation_space", "action_space"):
                space = getattr(env, name)
                _need(isinstance(space, gym.spaces.Text), f"{name} is {space!r}, not a Text space")
                _need(space.contains("go north") and space.contains(""), f"{name} refuses text")
        with ck.rule("gymnasium.check_env"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_env(env)
    finally:
        env.close()


def _check_info(ck: _Checker, info: Mapping[str, Any], where: str, done: bool) -> None:
    """The info rules and the candidate-list rule on one ``info``."""
    with ck.rule("info.core_keys"):
        missing = sorted(set(CORE_KEYS) - set(info))
        _need(not missing, f"info {where} lacks {missing}")
    with ck.rule("info.documented"):
        extra = sorted(set(info) - set(ALL_KEYS))
        _need(not extra, f"info {where} holds {extra}, not documented in budget_envs/info.py")
    with ck.rule("info.types"):
        for key, value in info.items():
            wanted, item = _declared_type(ALL_KEYS.get(key, "object"))
            _need(_type_ok(value, wanted), f"info[{key!r}] {where} is {value!r:.60}, not {wanted}")
            if item is not None:
                odd = [v for v in value if not isinstance(v, item)]
                _need(not odd, f"info[{key!r}] {where} holds {odd[:3]!r:.80}, not {item}")
            bad = _bad_value(value, f"info[{key!r}]")
            _need(bad is None, f"{bad} {where}: info values are {INFO_VALUE_TYPES}, never None")
    with ck.rule("digest.stable"):
        digest = info.get("state_hash")
        hexed = isinstance(digest, str) and re.fullmatch("[0-9a-f]{32}", digest)
        _need(hexed, f"info['state_hash'] {where} is {digest!r}, not 32 hex digits")
    with ck.rule("candidates.list"):
        offered = info.get("candidate_actions")
        _need(isinstance(offered, list), f"info['candidate_actions'] {where} is not a list")
        _need(all(isinstance(a, str) for a in offered), f"a candidate {where} is not a str")
        if done:
            _need(offered == [], f"candidates remain once the episode is over ({where})")
        else:
            _need(offered, f"a live episode offers no candidate action ({where})")


def _check_tasks(ck: _Checker, env: TextAgentEnv) -> None:
    with ck.rule("tasks.ids"):
        ids = list(env.task_ids)
        _need(ids, "task_ids is empty")
        _need(all(isinstance(t, str) for t in ids), f"task ids must be str, got {ids[:3]!r}")
        _need(len(set(ids)) == len(ids), "task_ids lists a task twice")
        for pick in (0, ids[-1]):
            _, info = env.reset(options={"task_id": pick})
            want = ids[0] if pick == 0 else pick
            _need(info["task_id"] == want, f"options task_id={pick!r} played {info['task_id']!r}")
        for bad, kind in ((len(ids), ValueError), ("no-such-task", ValueError), (1.5, TypeError)):
            try:
                env.reset(options={"task_id": bad})
            except kind as exc:  # a bad index or id is quoted
                _need(kind is TypeError or repr(bad) in str(exc), f"{exc} does not quote {bad!r}")
                continue
            _need(False, f"options task_id={bad!r} was not refused with {kind.__name__}")
    with ck.rule("tasks.level"):
        levels = [env.task_level(t) for t in env.task_ids]
        given = [lv for lv in levels if lv is not None]
        missing = len(levels) - len(given)
        _need(not given or not missing, f"task_level() is None for {missing} of {len(levels)}")
        hash(tuple(given))  # levels group tasks: they must be hashable


def _check_oracle(ck: _Checker, env: TextAgentEnv, seed: int) -> None:
    for task in _first_tasks(env):
        where, need = f"(task {task}, seed {seed})", -1
        with ck.rule("oracle.nonempty"):
            obs, info = env.reset(seed=seed, options={"task_id": task})
            _check_info(ck, info, f"after reset {where}", False)
            best = env.oracle_actions()
            _need(isinstance(best, list) and best, f"oracle_actions() is {best!r} after reset")
            _need(all(isinstance(a, str) for a in best), f"oracle_actions() gave {best!r:.80}")
            need = env.cost_to_go()
            _need(isinstance(need, (int, np.integer)), f"cost_to_go() gave {need!r}, not an int")
            _need(need >= 1, f"cost_to_go() is {need} at the start: a task solved by its start")
        if need < 1:  # broken above (rules collected): no length to win in
            continue
        with ck.rule("oracle.wins"):
            turns, reward = 0, 0.0
            while not env.done and turns < need + 50:
                best = env.oracle_actions()
                _need(best, f"the oracle has no move at turn {turns} of a live episode {where}")
                obs, reward, terminated, truncated, info = env.step(best[0])
                turns += 1
                _check_info(ck, info, f"at oracle turn {turns} {where}", env.done)
            won = info["won"] and reward == 1.0 or info.get("score") == 1.0
            _need(won, f"the oracle did not win in {turns} turns {where} (last: {obs[:120]!r})")
            if env.oracle_exact:
                _need(turns == need, f"the exact oracle took {turns} turns, cost_to_go() {need}")
            _need(env.oracle_actions() == [], "oracle_actions() is not [] once the episode is won")
            _need(env.cost_to_go() == 0, f"cost_to_go() is {env.cost_to_go()} once won, not 0")


def _check_candidates(ck: _Checker, env: TextAgentEnv, seed: int) -> None:
    from budget_envs.eval.runner.episode import agrees  # how eval judges an oracle match

    for task in _first_tasks(env):
        with ck.rule("candidates.oracle"):
            obs, info = env.reset(seed=seed, options={"task_id": task})
            states = 0
            while not env.done:
                best, offered = env.oracle_actions(), info["candidate_actions"]
                hits = [a for a in offered if agrees(a, best)]
                why = f"no candidate of {offered[:5]!r:.160} is an oracle action {best[:3]!r:.99}"
                _need(hits, f"task {task}, state {states}: {why}")
                obs, reward, terminated, truncated, info = env.step(hits[0])
                states += 1
                _need(states < 200, f"task {task}: 200 oracle candidates did not win")
            _need(info["won"], f"task {task}: the oracle's candidates did not win")
    rng = np.random.default_rng(seed + 7)
    for task in _first_tasks(env):
        with ck.rule("candidates.playable"):
            obs, info = env.reset(seed=seed + task, options={"task_id": task})
            for _ in range(12):
                offered = info["candidate_actions"]
                _need(offered, f"task {task}: a live episode offers no candidate action")
                action = offered[int(rng.integers(len(offered)))]
                obs, reward, terminated, truncated, info = env.step(action)
                _need(
                    not info["invalid_action"], f"candidate {action!r:.80} is invalid: {obs!r:.99}"
                )
                if terminated:
                    break


def _state(env: TextAgentEnv) -> tuple:
    return env.state_hash(), env.cost_to_go(), tuple(env.current_info()["admissible_actions"])


def _check_bad_input(ck: _Checker, env: TextAgentEnv, seed: int) -> None:
    obs, info = env.reset(seed=seed, options={"task_id": 0})
    limit = env.max_action_length
    for bad in (*BAD_ACTIONS, None, 42, b"go north", ["look"]):
        shown, stepped = repr(bad)[:40], False
        before, turn = _state(env), env.turn
        with ck.rule("bad_input.turn"):
            try:
                obs, reward, terminated, truncated, info = env.step(bad)
                stepped = True
            except Exception as exc:
                why = f"raised {type(exc).__name__}: {str(exc)[:120]}"
                _need(False, f"step({shown}) {why}; in _execute, raise ActionRejected instead")
            _need(isinstance(obs, str) and obs.strip(), f"step({shown}) gave no feedback text")
            _need(env.observation_space.contains(obs), f"step({shown})'s text is off the space")
            _need(env.turn == turn + 1, f"step({shown}) was not counted as a turn")
            if not isinstance(bad, str) or bad in MUST_REJECT or len(bad) > limit:
                _need(info["invalid_action"], f"step({shown}) was not an invalid turn")
            if not isinstance(bad, str):
                _need("text" in obs, f"step({shown})'s feedback does not say text was expected")
        if not (stepped and info["invalid_action"]):
            if stepped and terminated:
                env.reset(seed=seed, options={"task_id": 0})
            continue
        with ck.rule("bad_input.state"):
            _need(reward == 0.0 and not terminated, f"invalid step({shown}) earned or ended")
            why = "changed the state (hash, cost-to-go or actions): reject before any change"
            _need(_state(env) == before, f"invalid step({shown}) {why}")


def _check_snapshots(ck: _Checker, env: TextAgentEnv, seed: int) -> None:
    def play(info: Mapping[str, Any], turns: int, rng: np.random.Generator) -> list:
        out = []
        for _ in range(turns):
            action = _policy_action(env, info, rng)
            obs, reward, terminated, truncated, info = env.step(action)
            out.append((action, obs, float(reward), terminated, info["state_hash"]))
            if terminated:
                break
        return out

    with ck.rule("snapshots.round_trip"):
        task = _first_tasks(env)[-1]
        obs, info = env.reset(seed=seed + 2, options={"task_id": task})
        out = play(info, 2, np.random.default_rng(seed + 1))
        obs = out[-1][1] if out else obs
        snap, at = env.snapshot(), _state(env)
        first = play(env.current_info(), 3, np.random.default_rng(seed + 9))
        back = env.restore(snap)
        _need(back == obs, f"restore() gave {back[:80]!r}, not the snapshot's {obs[:80]!r}")
        _need(_state(env) == at, "restore() did not bring back the hash, cost-to-go and actions")
        second = play(env.current_info(), 3, np.random.default_rng(seed + 9))
        _need(first == second, f"after restore() the episode went otherwise: {second!r:.200}")
    with ck.rule("digest.stable"):
        _, a = env.reset(seed=seed + 1, options={"task_id": 0})
        _, b = env.reset(seed=seed + 99, options={"task_id": 0})
        _need(a["state_hash"] == b["state_hash"], "two resets of one task start from two hashes")


def _check_faults(ck: _Checker, env: TextAgentEnv, seed: int) -> None:
    kinds = GENERIC_KINDS + tuple(env.fault_kinds())
    with ck.rule("faults.cells"):
        cells = env.fault_cells()
        _need(set(cells) == set(kinds), f"fault_cells() has {sorted(cells)}, the kinds are {kinds}")
        odd = {k: c for k, c in cells.items() if tuple(c) not in CELLS}
        _need(not odd, f"kinds {odd} have no cell of {list(CELLS)} (family_fault_cells)")
    if env.fault_kinds():
        with ck.rule("faults.hook"):
            have = type(env)._fault is not TextAgentEnv._fault
            _need(have, f"fault_kinds() lists {list(env.fault_kinds())} but _fault() is missing")
    if ck.broken("faults."):
        return
    for kind in kinds:
        where = f"after a {kind!r} fault"
        with ck.rule("faults.arm"):
            obs, info = env.reset(seed=seed, options={"task_id": 0})
            env.arm_fault(kind, np.random.default_rng(seed))
            obs, reward, terminated, truncated, info = env.step(env.oracle_actions()[0])
            fault = info.get("fault") or {}
            _need(fault.get("kind") == kind, f"info['fault'] is {fault!r:.120} {where}")
            _need(fault.get("effect") in FAULT_EFFECTS, f"effect {fault.get('effect')!r} {where}")
            _need(fault.get("cell") == list(cells[kind]), f"cell {fault.get('cell')!r} {where}")
            _need(env.observation_space.contains(obs), f"the observation {where} is off the space")
            _check_info(ck, info, where, env.done)
        with ck.rule("faults.replay"):
            snap, at = env.snapshot(), env.state_hash()
            first = env.step(env.oracle_actions()[0])[:4] if not env.done else ()
            env.restore(snap)
            _need(env.state_hash() == at, f"restore() {where} did not bring the state back")
            second = env.step(env.oracle_actions()[0])[:4] if not env.done else ()
            _need(first == second, f"restore() {where}: the next turn differs ({second!r:.160})")


def _check_determinism(ck: _Checker, env: TextAgentEnv, build: Callable, seed: int) -> None:
    with ck.rule("determinism.seed"):
        other = build()
        try:
            for s, options in ((seed + 3, None), (seed + 4, {"task_id": 0})):
                a, b = _transcript(env, s, options), _transcript(other, s, options)
                at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
                why = f"two fresh envs differ from transcript line {at} on: use seeded generators"
                _need(a == b, f"seed {s}, options {options}: {why}")
        finally:
            other.close()


def _split_envs(ck: _Checker, build: Callable) -> dict[str, TextAgentEnv] | None:
    """One env per split, or None (with the advisory warning) when ``split=`` is not taken."""
    envs: dict[str, TextAgentEnv] = {}
    with ck.rule("splits.accepted"):
        try:
            envs["valid"] = build(split="valid")
        except TypeError as exc:
            if "split" not in str(exc):
                raise
            _need(False, f"the constructor takes no split= ({exc}): no held-out tasks")
    if not envs:
        ck.not_run.append("splits.*: the family takes no split=")
        return None
    envs["train"], envs["test"] = build(split="train"), build(split="test")
    return envs


def _check_splits(ck: _Checker, env: TextAgentEnv, build: Callable, own_split: bool) -> None:
    envs = _split_envs(ck, build)
    if envs is None:
        return
    try:
        with ck.rule("splits.unknown"):
            try:
                build(split="holdout").close()
            except ValueError as exc:
                _need("'holdout'" in str(exc), f"the refusal does not quote the split: {exc}")
            else:
                _need(False, "split='holdout' was accepted: refuse it with check_split()")
        with ck.rule("hooks.task_identity"):
            have = type(env).task_identity is not TextAgentEnv.task_identity
            _need(have, "the family takes split= but task_identity(task_id) -> tuple is missing")
        with ck.rule("splits.ids_disjoint"):
            ids = {name: list(e.task_ids) for name, e in envs.items()}
            _need(all(ids.values()), f"a split has no task: {[n for n, v in ids.items() if not v]}")
            if not own_split:
                _need(ids["train"] == list(env.task_ids), "split='train' is not the default list")
            _disjoint(ids, "task ids")
        with ck.rule("splits.content_disjoint"):
            found = {n: [e.task_identity(t) for t in ids[n]] for n, e in envs.items()}
            for name, identities in found.items():
                _need(len(set(identities)) == len(identities), f"split {name} repeats a task")
            _disjoint(found, "task identities (the same task under other ids)")
        with ck.rule("splits.plays"):
            held = envs["test"]
            _, info = held.reset(seed=0, options={"task_id": ids["test"][0]})
            _need(info["task_id"] == ids["test"][0] and info["goal"], "a test task has no goal")
            _need(held.step("")[4]["invalid_action"], "an empty action is valid on a test task")
    finally:
        for e in envs.values():
            e.close()


def _disjoint(per_split: Mapping[str, list], what: str) -> None:
    names = sorted(per_split)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = set(per_split[a]) & set(per_split[b])
            _need(not shared, f"splits {a} and {b} share {what}: {sorted(map(str, shared))[:2]}")


def _check_close(ck: _Checker, env: TextAgentEnv) -> None:
    with ck.rule("lifecycle.close"):
        env.close()
        for name in ("step", "reset", "oracle_actions", "cost_to_go", "snapshot"):
            try:
                getattr(env, name)(*(["look"] if name == "step" else []))
            except error.ClosedEnvironmentError:
                continue
            _need(False, f"{name}() after close() did not raise EnvClosed (call super().close())")
        env.close()


#: The checks that play episodes on the main env, by their main rule.
_PLAYS = (("oracle.wins", _check_oracle), ("candidates.oracle", _check_candidates))
_PLAYS += (("bad_input.turn", _check_bad_input), ("snapshots.round_trip", _check_snapshots))
_PLAYS += (("faults.arm", _check_faults),)


# ---------------------------------------------------------------------- the entry point
def check_family(
    env_or_id: Any,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
    raise_on_fail: bool = True,
) -> ContractReport:
    """Check a family against every rule of :data:`RULES` (docs/extending.md lists them).

    Args:
        env_or_id: a registered id (its row's kwargs apply), a :class:`TextAgentEnv` subclass,
            or an env (wrapped or not) of one. The checker builds fresh bare envs as it needs
            them (a second one for determinism, one per split).
        env_kwargs: constructor keyword arguments of every env the checker builds (keep the
            task lists small: ``{"level": 1, "tasks_per_level": 2}``); ``split`` is added.
        seed: the base of every seed and generator the checks use.
        raise_on_fail: raise :class:`~budget_envs.errors.ContractViolation` at the first broken
            required rule (as Gymnasium's ``check_env`` does); False runs every check and
            returns every finding. Advisory rules warn (:class:`ContractWarning`) either way.

    Returns:
        A :class:`ContractReport`; ``report.ok`` says no required rule is broken.

    Raises:
        ContractViolation: a required rule is broken (``raise_on_fail=True``); the message
            starts with the rule's id, e.g. ``[hooks.goal] MyEnv: the required hook _goal() ->
            str ... is missing: define _goal on the class. See docs/extending.md#rules-hooks``.
        TypeError: ``env_or_id`` is none of the above.
    """
    kwargs = dict(env_kwargs or {})
    subject, build, given = _builder(env_or_id, kwargs)
    ck = _Checker(subject, raise_on_fail)
    env = given if given is not None else build()
    try:
        _check_hooks(ck, env)
        if ck.broken("hooks."):
            ck.not_run.append("the checks that play: a required hook is missing")
            return ck.report()
        fresh = env if given is None else build()
        _check_require_reset(ck, fresh)
        if fresh is not env:
            fresh.close()
        checks = (
            ("gymnasium.check_env", lambda: _check_gymnasium(ck, build)),
            ("tasks.ids", lambda: _check_tasks(ck, env)),
            *((rule, lambda play=play: play(ck, env, seed)) for rule, play in _PLAYS),
            ("determinism.seed", lambda: _check_determinism(ck, env, build, seed)),
            ("splits.ids_disjoint", lambda: _check_splits(ck, env, build, "split" in kwargs)),
            ("lifecycle.close", lambda: _check_close(ck, env if given is None else build())),
        )
        for rule_id, check in checks:
            with ck.rule(rule_id, guard=True):  # a crash between rules breaks the main one
                check()
    finally:
        if given is None:
            env.close()
    return ck.report()
