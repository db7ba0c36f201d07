"""``BudgetMix/ALFWorld-v0``: ALFWorld's text games on alfworld's real PDDL engine."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from budget_envs._util import cache_root, check_int, check_levels, missing_dependency
from budget_envs._util import names_entity as _names
from budget_envs.core import UNREACHABLE, TextAgentEnv
from budget_envs.env_options import BaseOptions
from budget_envs.envs.alfworld import _deps, generate
from budget_envs.envs.alfworld.engine import AlfredEngine, GameFileError, warm_reset_cache
from budget_envs.envs.alfworld.oracle import ExpertError, HandcodedOracle, ModelOracle, PlanOracle
from budget_envs.errors import ActionRejected, UnknownSplit
from budget_envs.fault_turns import ReachFaults

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

__all__ = ["AlfWorldEnv", "default_cache_dir", "collect_game_files", "GameFileError", "ExpertError"]

_ORACLES = ("model", "planner", "handcoded")
_GOAL = re.compile(r"Your task is to: (.*?)\.?\s*$", re.S)
# alfworld 0.3's put command: its literal "put X in/on Y", or "put X in Y" / "put X on Y".
_LEGACY_PUT = re.compile(r"^\s*put\s+(.+?)\s+(?:in/on|in|on)\s+(.+?)\s*$", re.I)


def _check_installed() -> None:
    """Raise the install hint now if alfworld or textworld is missing, without importing them
    (alfworld's import writes to the environment; both take seconds); otherwise the first reset
    would be the first to fail."""
    for module in ("alfworld", "textworld"):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken install, or a module without a spec
            found = False
        if not found:
            raise missing_dependency(_deps._WHAT, "alfworld", f"No module named {module!r}")


def default_cache_dir() -> Path:
    """The suite's cache rule for ``alfworld`` (:func:`budget_envs._util.cache_root`)."""
    return cache_root("alfworld")


def collect_game_files(split_dir: str | os.PathLike, task_types: Sequence[str]) -> list[str]:
    """Playable ``game.tw-pddl`` files under ``split_dir`` with alfworld's own skip rules.

    Kept: folders with ``traj_data.json`` whose task type is wanted, whose path has neither
    ``movable`` nor ``Sliced``, and whose game file exists with ``"solvable": true``. Sorted, so the
    order does not depend on the file system.
    """
    games = []
    for root, _dirs, files in os.walk(split_dir):
        if "traj_data.json" not in files:
            continue
        if "movable" in root or "Sliced" in root:
            continue
        try:
            with open(os.path.join(root, "traj_data.json")) as f:
                task_type = json.load(f).get("task_type")
        except (OSError, ValueError) as exc:
            logger.warning("skipping %s: unreadable traj_data.json (%s)", root, exc)
            continue
        if task_type not in task_types:
            continue
        game = os.path.join(root, "game.tw-pddl")
        if not os.path.exists(game):
            continue
        try:
            with open(game) as f:
                solvable = json.load(f).get("solvable")
        except (OSError, ValueError) as exc:
            logger.warning("skipping %s: unreadable game file (%s)", game, exc)
            continue
        if not solvable:
            continue
        games.append(game)
    return sorted(games)


#: The common split names, as ALFWorld's own: ``valid`` is ``valid_seen``, ``test`` is
#: ``valid_unseen`` (held-out scenes).
_SPLIT_ALIASES = {"valid": "valid_seen", "test": "valid_unseen"}


def _check_split(split: Any) -> str:
    """ALFWorld's name of ``split`` (aliases resolved); UnknownSplit for anything else."""
    split = _SPLIT_ALIASES.get(split, split) if isinstance(split, str) else split
    if split not in generate.SPLITS:
        hint = ""
        if split == "test_unseen":
            hint = (
                " (ALFWorld has no test_unseen split: its held-out scenes are valid_unseen, "
                "which split='test' names)"
            )
        raise UnknownSplit(
            f"split must be one of {generate.SPLITS + tuple(_SPLIT_ALIASES)}, got {split!r}{hint}"
        )
    return split


def _selected_task_types(
    level: int | Sequence[int] | None, task_types: Sequence[int | str] | None
) -> tuple[str, ...]:
    """The task type names ``level`` or ``task_types`` select (all six for neither), in
    alfworld's order."""
    names = list(generate.TASK_TYPES.values())
    if level is not None:
        if task_types is not None:
            raise ValueError(
                f"pass level= (task type ids) or task_types=, not both (level={level!r})"
            )
        task_types = check_levels(level, tuple(generate.TASK_TYPES))
    if task_types is None:
        wanted = names
    else:
        if isinstance(task_types, (str, int)):
            raise TypeError(f"task_types must be a sequence of ids or names, got {task_types!r}")
        wanted = []
        for t in task_types:
            name = generate.TASK_TYPES.get(t) if isinstance(t, (int, np.integer)) else t
            if name not in names:
                raise ValueError(f"unknown task type {t!r}; expected 1-6 or one of {names}")
            wanted.append(name)
        if not wanted:
            raise ValueError("task_types must name at least one task type, got an empty list")
    return tuple(sorted(set(wanted), key=names.index))


class AlfWorldEnv(ReachFaults, TextAgentEnv):
    """ALFWorld household tasks (six task types) played through alfworld's TextWorld PDDL engine.

    By default the tasks come from a seeded generator that writes them in ALFWorld's dataset layout
    into a cache directory on first use; ``data_dir=`` (or ``$ALFWORLD_DATA``) plays a downloaded
    ALFWorld dataset unchanged. Observations and admissible commands are byte-identical to
    alfworld's own path (``AlfredTWEnv``); the engine memoises the slow parts.

    Args:
        split: ``"train"``, ``"valid_seen"`` or ``"valid_unseen"`` (ALFWorld's names), or the
            common ``"valid"`` (= ``valid_seen``) and ``"test"`` (= ``valid_unseen``).
        level: the family's levels are alfworld's six task types, numbered 1-6 as in alfworld
            (1 pick and place, 2 look at in light, 3 clean, 4 heat, 5 cool, 6 pick two): one,
            a list, or None for all six.
        tasks_per_level: tasks of each selected type (the first ones in index order); None
            (default) keeps the split's default set (600 / 240 / 240 generated tasks over all
            types, every game of a real dataset).
        task_types: the same selection as ``level`` by names (or ids); pass one of the two.
        max_receptacles: generated tasks only: keep scenes with at most this many receptacles
            (the smallest have 10, the largest 45), e.g. small scenes for CPU training; counted
            before ``tasks_per_level``. Not available with a real dataset.
        data_dir: a real ALFWorld data root (holding ``json_2.1.1/``) or a split folder.
        cache_dir: where generated tasks are written (default :func:`default_cache_dir`).
        n_tasks: deprecated (use ``tasks_per_level``): generated tasks of the split over all
            types, before the type filter.
        oracle: ``"model"`` (exact shortest plans; Fast Downward where a game does not fit the
            model), ``"planner"`` (Fast Downward's plan) or ``"handcoded"`` (alfworld's expert).
            ``cost_to_go`` always comes from the model (or the planner as fallback).
        legacy_put: accept alfworld 0.3's ``put X in/on Y`` (and ``put X in Y``, ``put X on Y``)
            as ``move X to Y``, the command alfworld 0.4 renamed it to; the turn then carries
            ``info["action_alias"]`` with the command that ran. Published prompts still use the
            old form. The admissible list stays alfworld's own (``move``).
        reset_cache: take each game's initial state from the process's reset cache (default; an
            LRU of :data:`~budget_envs.envs.alfworld.engine.RESET_CACHE_SIZE` games shared by
            the process's envs), so a reset to a game loaded before costs a few ms; False reads,
            parses and translates the game at every reset and restore (the behaviour before the
            cache, 0.1-0.5 s on small scenes). Same observations, hashes and transcripts either
            way. :attr:`reset_cache_stats` counts this env's hits.

    Snapshots use the base class's prefix replay (reload + replay; the reload is a reset cache
    hit, so it is cheap).

    Raises:
        gymnasium.error.DependencyNotInstalled: alfworld or textworld is not installed (the
            ``alfworld`` extra).
    """

    oracle_exact: bool = False
    native_snapshot: ClassVar[bool] = False
    #: ``phantom`` rolls back even an action that wins or loses the episode.
    phantom_ending_stands: ClassVar[bool] = False

    def __init__(
        self,
        *,
        split: str = "train",
        level: int | Sequence[int] | None = None,
        tasks_per_level: int | None = None,
        task_types: Sequence[int | str] | None = None,
        max_receptacles: int | None = None,
        data_dir: str | os.PathLike | None = None,
        cache_dir: str | os.PathLike | None = None,
        n_tasks: int | None = None,
        oracle: str = "model",
        legacy_put: bool = True,
        reset_cache: bool = True,
        **base: Unpack[BaseOptions],
    ) -> None:
        super().__init__(**base)
        split = _check_split(split)
        if oracle not in _ORACLES:
            raise ValueError(f"oracle must be one of {_ORACLES}, got {oracle!r}")
        if not isinstance(legacy_put, bool):
            raise TypeError(f"legacy_put must be a bool, got {legacy_put!r}")
        self.legacy_put = legacy_put
        if not isinstance(reset_cache, bool):
            raise TypeError(f"reset_cache must be a bool, got {reset_cache!r}")
        self.reset_cache = reset_cache
        self._alias: str | None = None
        #: Entities (display names) a permanent fault made unreachable for this episode.
        self.blocked: frozenset[str] = frozenset()
        if n_tasks is not None:
            warnings.warn(
                "AlfWorldEnv(n_tasks=...) is deprecated; use tasks_per_level= (tasks per type)",
                DeprecationWarning,
                stacklevel=2,
            )
            n_tasks = check_int("n_tasks", n_tasks, lo=1)
            if tasks_per_level is not None:
                raise ValueError(
                    f"pass tasks_per_level= or the deprecated n_tasks=, not both "
                    f"(n_tasks={n_tasks!r}, tasks_per_level={tasks_per_level!r})"
                )
        if tasks_per_level is not None:
            tasks_per_level = check_int("tasks_per_level", tasks_per_level, lo=1)
        if max_receptacles is not None:
            max_receptacles = check_int("max_receptacles", max_receptacles, lo=1)
        self.max_receptacles = max_receptacles
        selected = _selected_task_types(level, task_types)
        self.split = split
        self.task_types = selected
        self.oracle_kind = oracle
        # Per game (set at each load): True when the exact model plays this game's oracle.
        self.oracle_exact = False
        self.tasks_per_level = tasks_per_level
        self._n_tasks = n_tasks
        self._split_dir: Path | None = self._dataset_split(data_dir, split)
        self.source = "generated" if self._split_dir is None else "real"
        if max_receptacles is not None and self._split_dir is not None:
            raise ValueError(
                f"max_receptacles={max_receptacles!r} selects generated scenes; a real dataset "
                f"({str(self._split_dir)!r}) cannot be filtered by it"
            )
        self.cache_dir = cache_root("alfworld", cache_dir)
        _check_installed()
        self._ids: list[str] | None = None
        self._paths: dict[str, str] = {}
        self._specs: dict[str, generate.TaskSpec] = {}
        self._engine: AlfredEngine | None = None
        self._oracle: Any = None
        self._planner: PlanOracle | None = None
        self._goal_text = ""

    def _dataset_split(self, data_dir: str | os.PathLike | None, split: str) -> Path | None:
        """The split folder of a real dataset: ``data_dir``'s, else ``$ALFWORLD_DATA``'s (None:
        generated tasks)."""
        if data_dir is not None:
            return self._find_split(Path(data_dir).expanduser(), split, explicit=True)
        if os.environ.get("ALFWORLD_DATA"):
            return self._find_split(
                Path(os.environ["ALFWORLD_DATA"]).expanduser(), split, explicit=False
            )
        return None

    @staticmethod
    def _find_split(root: Path, split: str, explicit: bool) -> Path | None:
        for candidate in (root / "json_2.1.1" / split, root / split, root):
            if candidate.is_dir() and (candidate != root or candidate.name == split):
                return candidate
        if explicit:
            raise ValueError(
                f"data_dir {str(root)!r} holds no ALFWorld split {split!r}: expected "
                f"{str(root / 'json_2.1.1' / split)!r} (run alfworld-download, or omit data_dir "
                "to play generated tasks)"
            )
        logger.warning(
            "$ALFWORLD_DATA=%s holds no json_2.1.1/%s; playing generated tasks", root, split
        )
        return None

    # ------------------------------------------------------------------ tasks
    @property
    def task_ids(self) -> Sequence[str]:
        if self._ids is None:
            if self._split_dir is not None:
                games = collect_game_files(self._split_dir, self.task_types)
                if not games:
                    raise ValueError(
                        f"no playable {self.split} games for task types {list(self.task_types)} "
                        f"under {str(self._split_dir)!r}"
                    )
                ids = []
                taken: dict[str, int] = {}
                for game in games:
                    # <split>/<task_type>-<object>-...-<scene>/<trial>/game.tw-pddl
                    kind = Path(game).parent.parent.name.split("-")[0]
                    taken[kind] = taken.get(kind, 0) + 1
                    if self.tasks_per_level is not None and taken[kind] > self.tasks_per_level:
                        continue
                    tid = f"{self.split}/" + os.path.relpath(os.path.dirname(game), self._split_dir)
                    ids.append(tid)
                    self._paths[tid] = game
                self._ids = ids
            else:
                if self._n_tasks is not None:  # the deprecated count over all types
                    specs = [
                        s
                        for s in generate.task_specs(self.split, self._n_tasks)
                        if s.task_type in self.task_types
                        and (
                            self.max_receptacles is None or s.n_receptacles <= self.max_receptacles
                        )
                    ]
                else:
                    specs = list(
                        generate.select_specs(
                            self.split, self.task_types, self.tasks_per_level, self.max_receptacles
                        )
                    )
                self._specs = {s.task_id: s for s in specs}
                self._ids = [s.task_id for s in specs]
        return self._ids

    def task_identity(self, task_id: str) -> tuple:
        """A generated task's type, scene, goal and layout; a dataset game's folder under the split
        (ALFRED's ``<task>-<objects>-<scene>/<trial>``, which names the game and its world)."""
        self.task_ids  # noqa: B018  (builds the task tables on first use)
        spec = self._specs.get(task_id)
        if spec is not None:
            return (
                spec.task_type,
                spec.room,
                spec.scene,
                spec.goal,
                spec.receptacles,
                spec.objects,
                spec.agent_location,
            )
        if task_id in self._paths:
            return ("dataset", task_id.split("/", 1)[1])
        raise ValueError(f"unknown task {task_id!r}; e.g. {list(self.task_ids[:3])!r}")

    def _snapshot_scope(self) -> tuple:
        """Where the games come from: generated tasks or a real dataset (a task id names the
        same game in every env of the same source)."""
        return (("source", self.source),)

    def task_level(self, task_id: str) -> str | None:
        """The task type of a generated ``task_id`` (None for a dataset game), the stratum of
        ``budgetmix eval --tasks N``."""
        self.task_ids  # noqa: B018  (builds the task tables on first use)
        if task_id in self._specs:
            return self._specs[task_id].task_type
        if task_id in self._paths:
            return None
        raise ValueError(f"unknown task {task_id!r}; e.g. {list(self.task_ids[:3])!r}")

    @property
    def reset_cache_stats(self) -> dict[str, int]:
        """This env's game loads (resets and restores): ``hits`` that took the initial state from
        the reset cache, ``misses`` that read and parsed the game file."""
        if self._engine is None:
            return {"hits": 0, "misses": 0}
        return dict(self._engine.cache_stats)

    @property
    def data_root(self) -> Path:
        """The folder holding ``json_2.1.1/`` for the generated tasks of this env."""
        return self.cache_dir / generate.GENERATOR_VERSION

    def game_file(self, task_id: str) -> str:
        """The ``game.tw-pddl`` path of ``task_id`` (generated tasks are written on first need)."""
        self.task_ids  # noqa: B018 (fills the maps)
        if task_id in self._paths:
            return self._paths[task_id]
        spec = self._specs.get(task_id)
        if spec is None:
            raise ValueError(f"unknown task id {task_id!r}")
        path = generate.write_task(spec, str(self.data_root))
        self._paths[task_id] = path
        return path

    # ------------------------------------------------------------------ hooks
    def _load(self, task_id: str) -> str:
        self.blocked = frozenset()
        path = self.game_file(task_id)
        if self._engine is None:
            self._engine = AlfredEngine(cache=self.reset_cache)
        intro = self._engine.load(path)
        if self._engine.won:
            raise GameFileError(
                f"{path}: the goal already holds in the initial state (nothing to do)"
            )
        m = _GOAL.search(intro)
        self._goal_text = m.group(1).strip() if m else ""
        self._planner = PlanOracle(self._engine)
        self._oracle = (
            HandcodedOracle(self._engine, path, seed_key=task_id)
            if self.oracle_kind == "handcoded"
            else None
        )
        self._model = None
        self._model_at = None
        traj = os.path.join(os.path.dirname(path), "traj_data.json")
        try:
            with open(traj) as f:
                data = json.load(f)
            self._model = ModelOracle(data["task_type"], dict(data.get("pddl_params") or {}))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.info("%s: no usable traj_data.json (%s); the planner is the oracle", path, exc)
        self.won = self._engine.won
        fits = self._model is not None and self._model_solve() is not None
        if not fits:
            self._model = None
        self.oracle_exact = fits and self.oracle_kind == "model"
        return intro

    def prepare_reset(self, seed: int | None = None, options: dict | None = None) -> None:
        """Parse and translate the game ``reset(seed=seed, options=options)`` will play into the
        process's reset cache, touching no state of this env (a server runs it on a thread of
        its own, so a first reset of a game stalls no other session)."""
        if self.reset_cache:
            warm_reset_cache(self.game_file(self.task_for_reset(seed, options)))

    def close(self) -> None:
        if getattr(self, "_engine", None) is not None:
            self._engine.close()  # its Fast Downward copy goes back to the process's pool
            self._engine = None
        super().close()

    def _model_solve(self) -> tuple[int, list[str]] | None:
        key = (len(self._trace), self.blocked)
        if (
            self._model_at is None
            or self._model_at[0] != key
            or self._model_at[1] is not self._trace
        ):
            self._model_at = (key, self._trace, self._model.solve(self._engine, self.blocked))
        return self._model_at[2]

    def _mentions_blocked(self, command: str) -> bool:
        return any(_names(command, name) for name in self.blocked)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._alias = None
        return super().step(action)

    def legacy_command(self, action: str) -> str | None:
        """The ``move X to Y`` an alfworld 0.3 ``put X in/on Y`` stands for, if admissible now."""
        m = _LEGACY_PUT.match(action) if isinstance(action, str) else None
        if m is None or self._engine is None:
            return None
        command = f"move {m.group(1)} to {m.group(2)}"
        return command if self._engine.is_admissible(command) else None

    def _execute(self, action: str) -> tuple[str, float]:
        engine = self._engine
        if self.blocked and self._mentions_blocked(action):
            raise ActionRejected("Nothing happens.")
        if not engine.is_admissible(action):
            alias = self.legacy_command(action) if self.legacy_put else None
            if alias is None:
                raise ActionRejected("Nothing happens.")
            action = self._alias = alias
        command = action.strip()
        obs = engine.step(command)
        self._after(command)
        self.won = engine.won
        return obs, 1.0 if engine.won else 0.0

    def _after(self, command: str) -> None:
        self._planner.executed(command)
        if self._oracle is not None:
            self._oracle.executed(command)

    def _goal(self) -> str:
        return self._goal_text

    def _admissible(self) -> list[str]:
        if self._engine is None:
            return []
        if self.blocked:
            return [c for c in self._engine.admissible if not self._mentions_blocked(c)]
        return list(self._engine.admissible)

    def _extra_info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gamefile": None if self._engine is None else self._engine.path}
        if self._alias is not None:
            out["action_alias"] = self._alias
        return out

    # ------------------------------------------------------------------ oracle
    def _oracle_actions(self) -> list[str]:
        """The oracle's next action (one optimal-by-its-lights action)."""
        if self._oracle is not None and not self.blocked:
            return [self._oracle.next_action()]
        if self._model is not None and (self.oracle_kind == "model" or self.blocked):
            solved = self._model_solve()
            if solved is not None:
                firsts = [
                    a
                    for a in solved[1]
                    if self._engine.is_admissible(a) and not self._mentions_blocked(a)
                ]
                if firsts:
                    return firsts
                logger.warning(
                    "%s: the model's moves %s are not admissible; asking the planner",
                    self._engine.path,
                    solved[1],
                )
        return self._planner.plan()[:1]

    def _cost_to_go(self) -> int:
        """Fewest turns to success from here (the model; Fast Downward's plan length as fallback)."""
        if self._model is not None:
            solved = self._model_solve()
            if solved is not None:
                return solved[0]
        return len(self._planner.plan())

    # ------------------------------------------------------------------ faults
    # The kinds and their dispatch are ReachFaults' (fault_turns.py); what ALFWorld's world does:
    def _perturb(self, rng: np.random.Generator, obs: str, reward: float) -> tuple[str, str, float]:
        """``perturb``: the world changes under the player: a held object slips into a
        receptacle here, something closes, or the player wanders to another place (drawn from
        ``rng``; each a real engine move, so oracle tracking stays exact)."""
        engine = self._engine
        admissible = engine.admissible
        held = [f.arguments[1].name for f in engine._state.facts if f.name == "holds"]
        held_names = {engine._game.entity_infos[h].name for h in held}
        options = {
            "dropped": [
                c
                for c in admissible
                if c.startswith("move ") and any(c.startswith(f"move {h} to ") for h in held_names)
            ],
            "closed": [c for c in admissible if c.startswith("close ")],
            "moved": [c for c in admissible if c.startswith("go to ")],
        }
        kinds = [k for k in ("dropped", "closed", "moved") if options[k]]
        if not kinds:
            return (
                f"{obs}\n\nYou feel a little dizzy for a moment, but nothing changes.",
                "none",
                reward,
            )
        which = kinds[int(rng.integers(len(kinds)))]
        command = options[which][int(rng.integers(len(options[which])))]
        feedback = engine.step(command)
        self._after(command)
        self.won = engine.won
        lead = {
            "dropped": "Oops, it slips from your hands.",
            "closed": "A draught swings it shut.",
            "moved": "You lose your bearings and wander off.",
        }[which]
        if self.won:  # the disturbance itself finished the task: the turn's success reward
            reward = 1.0
        return f"{obs}\n\n{lead} {feedback}", "world", reward

    def _reach_pool(self) -> list[str]:
        """``unreachable`` / ``silent_unreachable`` draw from these: objects and receptacles
        named by an admissible command, never what the player holds (with the planner as oracle,
        only what its plan does not use: it ignores blocks). Commands naming a thing out of
        reach are no longer admissible, and the oracle's cost-to-go plans around it."""
        engine = self._engine
        infos = engine._game.entity_infos
        held = {infos[f.arguments[1].name].name for f in engine._state.facts if f.name == "holds"}
        names = sorted({i.name for i in infos.values() if i.name} - held - self.blocked)
        wanted = self._admissible()
        if self._model is None:  # the planner ignores blocks: only block what its plan skips
            plan = self._planner.plan()
            used = {n for n in names for c in plan if _names(c, n)}
            names = [n for n in names if n not in used]
        return sorted({n for n in names for c in wanted if _names(c, n)})

    def _lost_for_good(self) -> bool:
        """Whether the model finds no way to win around ``blocked`` (never without the model)."""
        if self._model is None:
            return False
        solved = self._model.solve(self._engine, self.blocked)
        return solved is not None and solved[0] >= UNREACHABLE

    def _state_digest(self) -> str | None:
        """The PDDL state's facts (sorted text): locations, contents, held, open, toggled.

        ``not_atlocation`` facts are left out: the compiled domain adds one for each place the
        agent walked away from, so they record the path, not where anything is (``atlocation``
        does; admissible actions and ``look`` do not depend on them). Type and affordance facts
        never change within a task (the task id is hashed), so they are skipped for speed. Objects
        a permanent fault put out of reach are part of the state.
        """
        if self._engine is None or self._engine._state is None:
            return None
        memo = self.__dict__.setdefault("_fact_text", {})
        if memo.get("__path__") != self._engine.path:
            memo.clear()
            memo["__path__"] = self._engine.path
        out = []
        for fact in self._engine._state.facts:
            if fact.name in _UNHASHED_FACTS:
                continue
            text = memo.get(fact)
            if text is None:
                text = memo[fact] = str(fact)
            out.append(text)
        out.sort()
        # A permanent fault's effect: objects out of reach for the rest of the episode.
        out.extend(f"blocked {name}" for name in sorted(self.blocked))
        return "\n".join(out)


#: Facts ``_state_digest`` leaves out: the path record and the per-task constants.
_UNHASHED_FACTS = frozenset(
    (
        "not_atlocation cancontain receptacletype objecttype pickupable openable cleanable "
        "coolable heatable isreceptacleobject sliceable toggleable receptacleatlocation"
    ).split()
)
