"""Loading an ALFWorld game file: read, parse, translate; what the reset cache saves.

:func:`_build` is the cold load of a ``game.tw-pddl`` file: the JSON read and checked, the
grammar and domain parsed into textworld's ``GameLogic``, the PDDL problem translated to SAS by
Fast Downward (the facts a state starts from are taken once, then kept). The result, a
:class:`_GameCache`, is what :class:`~budget_envs.envs.alfworld.engine.AlfredEngine` builds a
fresh engine state from (:func:`_new_state`) at every load, whether it comes from the reset cache
or not; :func:`_replan_sas` adds the optimised translation once a plan is asked for.
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from budget_envs.envs.alfworld import _deps
from budget_envs.errors import GameFileError

_TRANSLATE_LOCK = threading.Lock()
#: textworld's parsers (module-level tatsu parsers) are not thread-safe: concurrent parses (the
#: service's sessions prepare resets on threads) failed with "'NoneType' object is not
#: iterable" and "pop from empty list". Every parse (here and in
#: :mod:`~budget_envs.envs.alfworld.textgen`) holds it.
_PARSE_LOCK = threading.Lock()


@dataclass
class _Translation:
    task: Any
    sas: str
    sas_replan: str | None
    init_facts: list
    types: list
    dynamic_predicates: frozenset
    name2type: dict
    first_state_facts: list | None = None


def _translate(domain: str, problem: str) -> _Translation:
    """The plain SAS translation of a problem and what a state is built from (the optimised one
    is made by :func:`_replan_sas` when a plan is asked for)."""

    def make() -> _Translation:
        import fast_downward  # noqa: PLC0415 (lazy heavy import)
        from textworld.logic import Proposition, Variable  # noqa: PLC0415

        argv = sys.argv
        with _TRANSLATE_LOCK:
            try:
                task, sas = fast_downward.pddl2sas(domain, problem, verbose=False)
            finally:
                sys.argv = argv
        name2type = {o.name: o.type_name for o in task.objects}
        pddl = fast_downward.translate.pddl
        facts = []
        for atom in task.init:
            if isinstance(atom, pddl.conditions.Atom):
                if atom.predicate == "=":
                    continue
                facts.append(
                    Proposition(atom.predicate, [Variable(a, name2type[a]) for a in atom.args])
                )
            elif isinstance(atom, pddl.f_expression.Assign):
                if atom.fluent.symbol == "total-cost":
                    continue
                name = str(atom.expression.value)
                if name.isdigit():
                    continue
                facts.append(
                    Proposition(name, [Variable(a, name2type[a]) for a in atom.fluent.args])
                )
        dynamic = set()
        for action in task.actions:
            for eff in action.effects:
                dynamic.add(eff.literal.predicate.lower())
        types = [(t.name, t.supertype_names) for t in task.types]
        return _Translation(task, sas, None, facts, types, frozenset(dynamic), name2type)

    return make()


def _replan_sas(domain: str, problem: str, tr: _Translation) -> str:
    """The optimised translation the planner searches (made only when a plan is asked for)."""
    if tr.sas_replan is None:
        import fast_downward  # noqa: PLC0415

        argv = sys.argv
        with _TRANSLATE_LOCK:
            try:
                _, tr.sas_replan = fast_downward.pddl2sas(
                    domain, problem, verbose=False, optimize=True
                )
            finally:
                sys.argv = argv
    return tr.sas_replan


def _logic(domain: str, grammar: str) -> Any:
    _, logic_mod = _deps.textworld_pddl()
    with _PARSE_LOCK:
        return logic_mod.GameLogic(domain=domain, grammar=grammar)


def _new_state(lib: Any, tr: _Translation, logic: Any, problem: str) -> Any:
    """A textworld ``PddlState`` built from a memoised translation (same facts, same lib state)."""
    from collections import Counter, defaultdict  # noqa: PLC0415

    import textworld.logic  # noqa: PLC0415

    _, logic_mod = _deps.textworld_pddl()
    state = logic_mod.PddlState.__new__(logic_mod.PddlState)
    state._facts = defaultdict(set)
    state._vars_by_name = {}
    state._vars_by_type = defaultdict(set)
    state._var_counts = Counter()
    state._logic = logic
    state.downward_lib = lib
    state.pddl_problem = problem
    state.task, state.sas, state.sas_replan = tr.task, tr.sas, tr.sas_replan
    state._actions = {a.name: a for a in tr.task.actions}
    for name, supers in tr.types:
        try:
            logic.types.add(textworld.logic.Type(name, supers))
        except ValueError:
            pass
    lib.load_sas(tr.sas.encode("utf-8"))
    state.name2type = tr.name2type
    state.add_facts(tr.init_facts)
    if tr.first_state_facts is None:
        size = lib.get_state_size()
        atoms = (logic_mod.Atom * size)()
        lib.get_state(atoms)
        facts = [a.get_fact(tr.name2type) for a in atoms]
        tr.first_state_facts = [f for f in facts if not f.is_negation]
    state.add_facts(tr.first_state_facts)
    return state


@dataclass
class _GameCache:
    """A game's initial state as loading leaves it, and what never changes within the game:
    the parsed file, grammar and domain (``logic``), the translation (``tr``, with the facts
    Fast Downward starts from), entity names, the intro, static commands. Nothing in it changes
    while a game is played (each load builds a fresh engine state from it), so one entry serves
    every reset and every engine of the process."""

    data: dict
    logic: Any
    tr: _Translation
    entity_infos: dict | None = None
    intro: str | None = None
    static_actions: dict = field(default_factory=dict)  # action name -> placeholders read, or None
    commands: dict = field(default_factory=dict)  # (action name, args) -> command text


def _read_game(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise GameFileError(f"{path}: game file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GameFileError(f"{path}: not a readable JSON game file ({exc})") from exc
    if not isinstance(data, dict):
        raise GameFileError(f"{path}: expected a JSON object, got {type(data).__name__}")
    missing = [
        k for k in ("pddl_domain", "grammar", "pddl_problem") if not isinstance(data.get(k), str)
    ]
    if missing:
        raise GameFileError(f"{path}: missing or non-text keys {missing}")
    return data


def _build(path: str) -> _GameCache:
    """Read, parse and translate ``path``: the cold load (what every reset did before the cache)."""
    data = _read_game(path)
    try:
        logic = _logic(data["pddl_domain"], data["grammar"])
    except Exception as exc:
        raise GameFileError(f"{path}: the grammar or domain does not parse ({exc})") from exc
    try:
        tr = _translate(data["pddl_domain"], data["pddl_problem"])
    except KeyError as exc:
        raise GameFileError(
            f"{path}: the PDDL problem uses an undeclared object or constant {exc} "
            "(or its goal cannot be satisfied by any declared object)"
        ) from exc
    except SystemExit as exc:
        raise GameFileError(f"{path}: the PDDL does not translate (exit {exc.code})") from exc
    except Exception as exc:
        raise GameFileError(
            f"{path}: the PDDL does not translate ({type(exc).__name__}: {exc})"
        ) from exc
    return _GameCache(data, logic, tr)
