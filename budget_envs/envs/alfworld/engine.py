"""ALFWorld games on textworld's PDDL engine, with the slow parts memoised.

:class:`AlfredEngine` plays a ``game.tw-pddl`` file the way alfworld's ``AlfredTWEnv`` does
(textworld's ``PddlEnv`` + ``AlfredDemangler`` + ``AlfredInfos``): same domain, grammar, Fast
Downward state and text derivations, hence the same observations and admissible commands. What
it adds is caching, none of which changes a byte of output:

* the reset cache: each game's initial state as loading leaves it (the parsed game file, the
  parsed grammar and domain, the PDDL->SAS translation, four per load+reset upstream, and the
  facts Fast Downward starts from) is kept per process in one bounded LRU of
  :data:`RESET_CACHE_SIZE` games, keyed by the file (path, size and modification time). A reset to
  a game in it only rebuilds a fresh engine state from the cached one (a few ms on small scenes
  instead of 0.1-0.5 s of parsing and translating). :func:`reset_cache_info` counts hits;
  :func:`set_reset_cache_size` changes the bound; ``AlfredEngine(cache=False)`` bypasses it;
* a command whose template only reads static facts (e.g. ``go to`` reads ``receptacleatlocation``,
  which no action changes) is derived once per game and reused; the intro text is derived once.

Reading, parsing and translating a game file live in :mod:`~budget_envs.envs.alfworld.loading`,
the text derivation in :mod:`~budget_envs.envs.alfworld.textgen`. :func:`reference_env` builds
alfworld's own path for tests and benchmarks.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import weakref
from collections import OrderedDict
from typing import Any

from budget_envs._util import check_int
from budget_envs.envs.alfworld import _deps
from budget_envs.envs.alfworld.loading import (
    _build,
    _GameCache,
    _new_state,
    _replan_sas,
    _Translation,
)
from budget_envs.envs.alfworld.textgen import _deriver
from budget_envs.errors import GameFileError

logger = logging.getLogger(__name__)

__all__ = [
    "AlfredEngine",
    "GameFileError",
    "RESET_CACHE_SIZE",
    "clear_caches",
    "reference_env",
    "reset_cache_info",
    "set_reset_cache_size",
]

#: Games whose initial state the reset cache keeps per process (least recently used dropped
#: first). One entry holds about 0.65 MB of Python objects for a 10-receptacle scene, 1.5 MB at
#: 20, 2.3 MB at 30 and 4.2 MB at 45 (tracemalloc), so the bound is about 85 MB of small scenes
#: and 550 MB at worst (all 45-receptacle scenes).
RESET_CACHE_SIZE = 128


class _LRU(OrderedDict):
    """A bounded least-recently-used map that counts hits, misses and evictions."""

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize
        self.hits = self.misses = self.evictions = 0
        self._lock = threading.Lock()
        self._making: dict[Any, threading.Event] = {}

    def get_or(self, key: Any, make) -> tuple[Any, bool]:
        """``(value, hit)``: the cached value, else ``make()`` stored (nothing stored if it raises).
        Threads asking for a key being made wait for it rather than making it again."""
        while True:
            with self._lock:
                if key in self:
                    self.move_to_end(key)
                    self.hits += 1
                    return self[key], True
                making = self._making.get(key)
                if making is None:
                    self._making[key] = threading.Event()
                    self.misses += 1
                    break
            making.wait()  # then look again (made, or failed: this thread tries)
        try:
            value = make()
            with self._lock:
                self[key] = value
                self.move_to_end(key)
                self.shrink()
        finally:
            with self._lock:
                self._making.pop(key).set()
        return value, False

    def shrink(self) -> None:
        while len(self) > self.maxsize:
            self.popitem(last=False)
            self.evictions += 1


_INITIAL_STATES = _LRU(RESET_CACHE_SIZE)


def warm_reset_cache(path: str) -> None:
    """Parse and translate ``path`` into the reset cache now (what a first load would do)."""
    key = _file_key(path)
    if key is not None:
        _INITIAL_STATES.get_or(key, lambda: _build(path))


def clear_caches() -> None:
    """Drop every cached initial state (the counters of :func:`reset_cache_info` stay)."""
    with _INITIAL_STATES._lock:
        _INITIAL_STATES.clear()


def reset_cache_info() -> dict[str, int]:
    """The process's reset cache: ``hits``, ``misses``, ``evictions`` (since start), ``size``
    (games held now) and ``maxsize``."""
    c = _INITIAL_STATES
    return {
        "hits": c.hits,
        "misses": c.misses,
        "evictions": c.evictions,
        "size": len(c),
        "maxsize": c.maxsize,
    }


def set_reset_cache_size(maxsize: int) -> int:
    """Bound the reset cache at ``maxsize`` games (>= 1; the oldest go now if it holds more);
    returns the previous bound."""
    maxsize = check_int("maxsize", maxsize, lo=1)
    with _INITIAL_STATES._lock:
        old, _INITIAL_STATES.maxsize = _INITIAL_STATES.maxsize, maxsize
        _INITIAL_STATES.shrink()
    return old


_PREDICATE = re.compile(r"([A-Za-z_][\w-]*)\s*\(")


def _file_key(path: str) -> tuple | None:
    """The reset cache's key of a game file: its real path, size and modification time (an
    edited file is a new entry); None when it cannot be read (the uncached load reports why)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (os.path.realpath(path), st.st_size, st.st_mtime_ns)


#: Fast Downward library copies of closed engines, reused by the next engines of this process.
#: ``fast_downward.load_lib()`` copies ``libdownward.so`` and dlopens the copy, which is never
#: unloaded: about 2.7 MiB and 5 memory maps per engine, so making and closing envs grew the
#: process without bound. The library keeps one global state (``load_sas`` sets it), and an
#: engine loads its game's state at every load, so a copy an engine gave back is as good as new.
_IDLE_LIBS: list[Any] = []
_LIBS_LOCK = threading.Lock()
#: Copies loaded in this process so far (idle or in use).
LIB_COPIES = {"loaded": 0}


def _take_lib() -> Any:
    with _LIBS_LOCK:
        if _IDLE_LIBS:
            return _IDLE_LIBS.pop()
        LIB_COPIES["loaded"] += 1
    from budget_envs.envs.alfworld.planner_lib import load_planner_lib  # noqa: PLC0415

    return load_planner_lib()


def _give_back(lib: Any) -> None:
    with _LIBS_LOCK:
        _IDLE_LIBS.append(lib)


class AlfredEngine:
    """Plays ALFWorld game files; one Fast Downward library copy per engine (not thread-safe).

    Args:
        cache: take initial states from the process's reset cache (default); False reads,
            parses and translates the game file at every load, as before the cache.
    """

    def __init__(self, cache: bool = True) -> None:
        if not isinstance(cache, bool):
            raise TypeError(f"cache must be a bool, got {cache!r}")
        self.cache = cache
        #: This engine's loads: ``hits`` from the reset cache, ``misses`` built from the file.
        self.cache_stats = {"hits": 0, "misses": 0}
        _deps.textworld_pddl()  # a clear install hint if fast_downward is missing
        self._lib = _take_lib()
        # The copy goes back to the pool at close(), or when the engine is collected.
        self._release = weakref.finalize(self, _give_back, self._lib)
        self.path: str | None = None
        self._game: _GameCache | None = None
        self._state = None
        self._replan_loaded = None
        self._tr: _Translation | None = None
        self._actions: list = []
        self._commands: list[str] = []
        self.admissible: list[str] = []
        self.feedback = ""
        self.won = False

    # ---------------------------------------------------------------- loading
    def load(self, path: str) -> str:
        """Load ``path`` and reset it; returns the intro text.

        The initial state comes from the reset cache when the file is in it (and stores it
        there otherwise), unless the engine was made with ``cache=False``.
        """
        key = _file_key(path) if self.cache else None
        if key is None:
            game = _build(path)
            self.cache_stats["misses"] += 1
        else:
            game, hit = _INITIAL_STATES.get_or(key, lambda: _build(path))
            self.cache_stats["hits" if hit else "misses"] += 1
        data, logic, tr = game.data, game.logic, game.tr
        self.path, self._game, self._tr, self._logic = path, game, tr, logic
        try:
            self._state = _new_state(self._lib, tr, logic, data["pddl_problem"])
        except (
            KeyError
        ) as exc:  # upstream's "KeyError: 'val1'": the translator proved the goal unreachable
            self.path = self._game = None
            raise GameFileError(
                f"{path}: unsolvable game: no state reachable from the initial one satisfies the "
                f"goal (the PDDL translation yields the placeholder {exc})"
            ) from exc
        if game.entity_infos is None:
            game.entity_infos = self._entity_infos()
            for name, action in logic.actions.items():
                used = {p.lower() for p in _PREDICATE.findall(action.template)}
                if used & tr.dynamic_predicates:
                    game.static_actions[name] = None
                else:  # the command depends only on the placeholders its template names
                    words = set(re.findall(r"[A-Za-z_]\w*", action.template))
                    game.static_actions[name] = words
        self.won = bool(self._state.check_goal())
        if game.intro is None:
            game.intro = _deriver().derive(logic.grammar, "#intro#", self._context({}, {}))
        self.feedback = game.intro
        self._refresh()
        return self.feedback

    def _entity_infos(self) -> dict:
        from textworld.generator.game import EntityInfo  # noqa: PLC0415

        misc = _deps.alfworld_module("alfworld.agents.utils.misc")
        infos = {
            v.name: EntityInfo(v.name, v.type) for fact in self._state.facts for v in fact.arguments
        }
        for info in infos.values():
            info.name = info.id
            info.definite = "the"
            info.indefinite = "a"
        demangler = misc.Demangler(game_infos=infos, shuffle=False)
        for info in infos.values():
            info.name = demangler.demangle_alfred_name(info.id)
        return infos

    def _context(self, variables: dict, mapping: dict, facts: list | None = None) -> dict:
        return {
            "state": self._state,
            "facts": list(self._state.facts) if facts is None else facts,
            "variables": variables,
            "mapping": mapping,
            "entity_infos": self._game.entity_infos,
        }

    # ---------------------------------------------------------------- playing
    def _refresh(self) -> None:
        """Recompute the valid actions and admissible commands (as ``PddlEnv`` does)."""
        game, infos = self._game, self._game.entity_infos
        actions = list(self._state.all_applicable_actions())
        names = {k: info.name for k, info in infos.items()}
        commands = []
        deriver = _deriver()
        facts = None
        for action in actions:
            used = game.static_actions.get(action.name)
            key = None
            cmd = None
            if used is not None:
                key = (action.name,) + tuple(
                    (ph.name, var.name) for ph, var in action.mapping.items() if ph.name in used
                )
                cmd = game.commands.get(key)
            if cmd is None:
                if facts is None:
                    facts = list(self._state.facts)
                variables = {ph.name: infos[var.name] for ph, var in action.mapping.items()}
                ctx = self._context(variables, action.mapping, facts)
                action.command_template = deriver.derive(
                    self._logic.grammar, action.command_template, ctx
                )
                cmd = action.format_command(names)
                if key is not None:
                    game.commands[key] = cmd
            else:
                action.command_template = cmd
            commands.append(cmd)
        self._actions, self._commands = actions, commands
        self.admissible = sorted(set(commands))

    def step(self, command: str) -> str:
        """Apply an admissible command; anything else gives ``Nothing happens.``"""
        command = command.strip()
        try:
            idx = self._commands.index(command)
        except ValueError:
            self.feedback = "Nothing happens."
            return self.feedback
        action = self._actions[idx]
        self._state.apply(action)
        variables = {
            ph.name: self._game.entity_infos[var.name] for ph, var in action.mapping.items()
        }
        self.feedback = _deriver().derive(
            self._logic.grammar, action.feedback_rule, self._context(variables, action.mapping)
        )
        self.won = bool(self._state.check_goal())
        self._refresh()
        return self.feedback

    def close(self) -> None:
        """Give this engine's library copy back to the process's pool (the engine is unusable
        afterwards); a second call does nothing."""
        self._release()
        self._state = None

    def is_admissible(self, command: str) -> bool:
        return command.strip() in self._commands

    # ---------------------------------------------------------------- oracle support
    def facts(self) -> list:
        """Human-readable facts (what ``EnvInfos(facts=True)`` gives), for the handcoded expert."""
        from textworld.logic import Proposition, Variable  # noqa: PLC0415

        infos = self._game.entity_infos
        out = []
        for fact in self._state.facts:
            args = [
                Variable(infos[v.name].name or infos[v.name].id, v.type) for v in fact.arguments
            ]
            out.append(Proposition(fact.name, args))
        return out

    def plan(self) -> list[str] | None:
        """Fast Downward's plan from the current state as commands; None if it finds none."""
        if self.won:
            return []
        if self._replan_loaded is not self._state:
            data = self._game.data
            sas = _replan_sas(data["pddl_domain"], data["pddl_problem"], self._tr)
            self._state.sas_replan = sas
            self._lib.load_sas_replan(sas.encode("utf-8"))
            self._replan_loaded = self._state
        commands = self._state.replan(self._game.entity_infos)
        if not commands:
            return None
        return commands

    def state_facts(self) -> frozenset:
        """The raw fact set (for fault bookkeeping and tests)."""
        return frozenset(self._state.facts)


def reference_env(gamefile: str, facts: bool = False) -> Any:
    """alfworld's own path on one game: ``textworld.gym`` + AlfredDemangler + AlfredInfos.

    This is what ``AlfredTWEnv.init_env`` builds (synchronous, batch of one). Returns the gym env;
    ``reset()`` gives ``([obs], infos)`` and ``step([cmd])`` gives ``([obs], scores, dones, infos)``.
    """
    import textworld  # noqa: PLC0415
    import textworld.gym  # noqa: PLC0415

    tw_env = _deps.alfworld_module("alfworld.agents.environment.alfred_tw_env")
    request = textworld.EnvInfos(
        won=True, admissible_commands=True, facts=facts, extras=["gamefile"]
    )
    env_id = textworld.gym.register_games(
        [gamefile],
        request,
        batch_size=1,
        asynchronous=False,
        max_episode_steps=10**6,
        wrappers=[tw_env.AlfredDemangler(shuffle=False), tw_env.AlfredInfos],
    )
    return textworld.gym.make(env_id)
