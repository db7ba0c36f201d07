"""TextWorld games as BudgetMix envs: a thin adapter over ``textworld.start`` (not textworld.gym).

Every task is a game generated from a seed by TextWorld's own generator (see :mod:`.generate`),
or a user's ``.z8`` made with ``tw-make``. The adapter cleans the interpreter's text, keeps
game-system commands (save, script, quit, restart, undo, debug verbs) away from the interpreter,
remembers the end of an episode, and adds an exact oracle where the game is small enough.

Each concern has its own module: the task list (:mod:`.tasks`), starting the interpreter
(:mod:`.interpreter`), its text (:mod:`.text`), the fault hooks (:mod:`.faults`) and native
snapshots (:mod:`.snapshot`). ``INTERPRETER_SEED``, ``MAX_COMMAND_BYTES``, ``clean_text``,
``clean_intro`` and ``meta_verb`` are still importable from here (``import x as x``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from budget_envs._util import check_split
from budget_envs.core import UNREACHABLE, TextAgentEnv
from budget_envs.env_options import BaseOptions
from budget_envs.envs.textworld import generate as gen
from budget_envs.envs.textworld import interpreter
from budget_envs.envs.textworld.faults import FaultHooks
from budget_envs.envs.textworld.interpreter import INTERPRETER_SEED as INTERPRETER_SEED
from budget_envs.envs.textworld.oracle import LIVE, QuestRules, StateGraph
from budget_envs.envs.textworld.snapshot import NativeSnapshots
from budget_envs.envs.textworld.tasks import TaskList
from budget_envs.envs.textworld.text import MAX_COMMAND_BYTES as MAX_COMMAND_BYTES
from budget_envs.envs.textworld.text import check_command, clean_intro, clean_text
from budget_envs.envs.textworld.text import meta_verb as meta_verb
from budget_envs.errors import GenerationError

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "CoinCollectorEnv",
    "CookingEnv",
    "TextWorldEnv",
    "TreasureHunterEnv",
]

logger = logging.getLogger(__name__)

#: Whether this process has already warned that games are generated on first use.
_warned_lazy_generation = False


class TextWorldEnv(FaultHooks, NativeSnapshots, TaskList, TextAgentEnv):
    """A generated TextWorld game per task, played through ``textworld.start``.

    Args:
        level: one level or a list of levels (see :func:`.generate.valid_levels`); default: the
            family's graded set (a few turns up to 40+).
        tasks_per_level: games per level (seeds ``0..n-1``; default 10).
        seeds: an explicit list of seeds instead of ``tasks_per_level`` (a count here is
            deprecated: it means ``tasks_per_level``).
        split: ``"train"`` (default: the games of the seeds above, ids
            ``<family>-L<level>-s<seed>``), ``"valid"`` or ``"test"``: held-out games, each seed
            replaced by one derived from ``(seed, split)``, ids ``<split>/<family>-L<level>-s<seed>``
            with the derived seed (generated games only).
        game_files: play these ``.z8`` files (each with its ``.json`` beside it) instead.
        cache_dir: where generated games are kept (default: ``$BUDGET_ENVS_CACHE/textworld`` or
            the user cache dir); games are made the first time they are played.
        prepare: generate every task's game (all of :attr:`task_ids`) now, in parallel, instead
            of at the first reset that plays it (what ``budgetmix prepare textworld`` does), so
            no later reset or vector-env autoreset waits for a game. Games already cached are
            kept; a game that cannot be made raises :class:`~budget_envs.errors.GenerationError`.
        generation_timeout: seconds allowed to generate one game.
        oracle_max_states: largest state graph the exact oracle explores; above it the oracle is
            TextWorld's ``policy_commands`` (heuristic) and ``oracle_exact`` is False.

    Raises:
        gymnasium.error.DependencyNotInstalled: ``textworld`` is not installed (the
            ``textworld`` extra).

    Example:
        The first play of a game generates it (a few seconds), later ones load it from the cache.

        >>> import gymnasium as gym
        >>> import budget_envs
        >>> env = gym.make("BudgetMix/TextWorld-v0", level=1, seeds=1, budget=20)
        >>> obs, info = env.reset(seed=0)
        >>> info["task_id"], env.unwrapped.oracle_exact
        ('custom-L1-s0', True)
        >>> while not (info["won"] or info["budget"]["remaining"] == 0):
        ...     obs, r, terminated, truncated, info = env.step(env.unwrapped.oracle_actions()[0])
        >>> info["won"], info["score"], info["budget"]["used"]
        (True, 1.0, 3)
    """

    family: ClassVar[str] = "custom"
    native_snapshot: ClassVar[bool] = True

    def __init__(
        self,
        *,
        level: int | Sequence[int] | None = None,
        tasks_per_level: int | None = None,
        seeds: Sequence[int] | None = None,
        split: str = "train",
        game_files: Sequence[str | os.PathLike] | None = None,
        cache_dir: str | os.PathLike | None = None,
        prepare: bool = False,
        generation_timeout: float = 300.0,
        oracle_max_states: int = 1000,
        **base: Unpack[BaseOptions],
    ) -> None:
        super().__init__(**base)
        if isinstance(generation_timeout, bool) or not isinstance(generation_timeout, (int, float)):
            raise TypeError(f"generation_timeout must be a number, got {generation_timeout!r}")
        if not generation_timeout > 0:
            raise ValueError(f"generation_timeout must be positive, got {generation_timeout!r}")
        if (
            isinstance(oracle_max_states, bool)
            or not isinstance(oracle_max_states, (int, np.integer))
            or oracle_max_states < 1
        ):
            raise ValueError(f"oracle_max_states must be a positive int, got {oracle_max_states!r}")
        if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
            raise TypeError(f"cache_dir must be a path or None, got {cache_dir!r}")
        if not isinstance(prepare, bool):
            raise TypeError(f"prepare must be a bool, got {prepare!r}")
        self.cache_dir = cache_dir
        self.generation_timeout = float(generation_timeout)
        self.oracle_max_states = int(oracle_max_states)
        self._files: dict[str, Path] = {}
        self._specs: dict[str, gen.GameSpec] = {}
        self.split = check_split(split)
        if game_files is not None:
            if self.split != "train":
                raise ValueError(
                    f"split={self.split!r} selects generated games; game_files= plays given files"
                )
            if level is not None:
                raise ValueError(f"pass either level= or game_files=, not both (level={level!r})")
            self._ids = self._file_tasks(game_files)
        else:
            self._ids = self._generated_tasks(level, self._seed_list(tasks_per_level, seeds))
        interpreter.check_installed()
        if prepare and self._specs:
            self._prepare_games()
        #: Whether the oracle of the current game is exact (set at every load).
        self.oracle_exact = False
        self._tw = None
        self._path: str | None = None
        self._graph: StateGraph | None = None
        self._rules: QuestRules | None = None
        self._state: Any = None
        self._marks: tuple = ()
        self._marks_moves = 0
        self._objective = ""
        self._max_score = 1
        #: Entities (display names) a permanent fault put out of reach for this episode, and
        #: those of them the agent was told about (``unreachable``, not ``silent_unreachable``).
        self.blocked: frozenset[str] = frozenset()
        self._told: frozenset[str] = frozenset()

    # ------------------------------------------------------------------ making the games
    def game_path(self, task_id: str) -> Path:
        """The ``.z8`` of ``task_id``, generating it first if it is not cached yet."""
        if task_id in self._files:
            return self._files[task_id]
        spec = self._specs[task_id]
        if not _warned_lazy_generation and not gen.is_cached(spec, self.cache_dir):
            self._warn_lazy_generation(task_id)
        return gen.ensure_game(spec, self.cache_dir, self.generation_timeout)

    def prepare_reset(self, seed: int | None = None, options: dict | None = None) -> None:
        """Generate the game ``reset(seed=seed, options=options)`` will play if it is not cached,
        touching no state of this env (a server runs it on a thread of its own, so a game
        generated on first use stalls no other session)."""
        self.game_path(self.task_for_reset(seed, options))

    def _warn_lazy_generation(self, task_id: str) -> None:
        """Say once per process why a reset is slow and how to generate the games beforehand."""
        global _warned_lazy_generation
        _warned_lazy_generation = True
        command = self._prepare_command()
        if command is None:
            how = (
                "; `budgetmix prepare textworld` makes train games of seeds 0..n-1 only, not "
                "this env's seeds or split"
            )
        else:
            how = f" or run: {command}"
        logger.warning(
            "TextWorld games are generated on first use, about 2-10 s each (longer at high "
            "levels), then loaded from the cache %s; generating %s now. To generate this env's "
            "%d games beforehand, pass prepare=True (e.g. gymnasium.make(..., prepare=True))%s",
            gen.cache_root(self.cache_dir),
            task_id,
            len(self._specs),
            how,
        )

    def _prepare_games(self) -> None:
        """Generate every task's game now (``prepare=True``), as ``budgetmix prepare`` does."""
        from budget_envs.envs.textworld.prepare import prepare

        levels, seeds = self._grid()
        missing = sum(not gen.is_cached(spec, self.cache_dir) for spec in self._specs.values())
        if missing:
            logger.info(
                "generating %d of %d TextWorld games into %s",
                missing,
                len(self._specs),
                gen.cache_root(self.cache_dir),
            )
        records = prepare(
            self.family,
            levels,
            seeds,
            self.cache_dir,
            timeout=self.generation_timeout,
            jobs=max(1, min(missing, os.cpu_count() or 1)),
        )
        failures = [
            f"{r.family} level {r.level} seed {r.seed}: {r.error}" for r in records if r.error
        ]
        if failures:
            raise GenerationError(
                f"prepare=True: {len(failures)} of {len(records)} games could not be generated; "
                f"first: {failures[0]}"
            )

    # ------------------------------------------------------------------ game lifecycle
    def _open(self, path: str) -> None:
        """Start the interpreter on ``path`` (kept across resets of the same game)."""
        if self._tw is not None and self._path == path:
            return
        textworld = interpreter.import_textworld()
        self._close_game()
        self._tw = interpreter.start(textworld, path)
        self._path = path
        self._tracker = interpreter.layer(self._tw, "StateTracking")
        self._i7data = interpreter.layer(self._tw, "Inform7Data")
        self._jericho = self._tw.unwrapped._jericho
        game = self._tracker._game
        self._rules = QuestRules(game)
        self._graph = interpreter.graph_for(path, game, self.oracle_max_states)
        self.oracle_exact = self._graph is not None

    def _restart_game(self, path: str) -> dict[str, Any]:
        """Open ``path`` and restart its game; the objective and the top score are read."""
        self._open(path)
        state = self._tw.reset()
        self._objective = state["objective"] or ""
        self._max_score = state["max_score"] or 1
        return state

    def _load(self, task_id: str) -> str:
        self.blocked = self._told = frozenset()
        state = self._restart_game(str(self.game_path(task_id)))
        start = self._tracker._game_progression.state
        self._marks, _ = self._rules.advance(self._rules.start(), start)
        self._marks_moves = self._tracker._moves
        self._state = state
        return clean_intro(state["feedback"], self._objective)

    def _close_game(self) -> None:
        if self._tw is not None:
            self._tw.close()
            self._tw = None
            self._path = None

    def close(self) -> None:
        self._close_game()
        super().close()  # later calls raise EnvClosed, as in every family

    # ------------------------------------------------------------------ turns
    def _execute(self, action: str) -> tuple[str, float]:
        check_command(action)
        self._check_reach(action)
        obs, reward = self._play(action)
        if self.blocked and not (self.won or self.lost):
            self.lost = self._lost_for_good()
        return obs, reward

    def _play(self, command: str) -> tuple[str, float]:
        was_won = self.won
        state, _, _ = self._tw.step(command)
        self._state = state
        self._advance_marks()
        self.won = bool(state["won"])
        self.lost = bool(state["lost"]) and not self.won
        return clean_text(state["feedback"]), 1.0 if self.won and not was_won else 0.0

    def _advance_marks(self) -> None:
        """Quest completion after a turn (only when the tracker saw the world change)."""
        moves = self._tracker._moves
        if moves != self._marks_moves:
            self._marks_moves = moves
            self._marks, _ = self._rules.advance(self._marks, self._tracker._game_progression.state)

    def _goal(self) -> str:
        return self._objective

    def _admissible(self) -> list[str]:
        commands = list(self._state["admissible_commands"] or [])
        if self.blocked:
            return [c for c in commands if self._blocked_in(c) is None]
        return commands

    def _extra_info(self) -> dict[str, Any]:
        score = self._state["score"] if self._state is not None else 0
        return {"score": float(min(1.0, max(0.0, (score or 0) / self._max_score)))}

    # ------------------------------------------------------------------ oracle
    def _oracle(self) -> tuple[int, list[str]]:
        self._require_reset()
        if self.won:
            return 0, []
        if self.lost:
            return UNREACHABLE, []
        if self._graph is not None:
            found = self._graph_lookup()
            if found is not None:
                cost, actions = found
                commands = self._tracker._inform7.gen_commands_from_actions(actions)
                return cost, sorted(set(commands))
            logger.info("state outside the oracle's graph; using policy_commands")
        policy = list(self._state["policy_commands"] or [])
        if not policy or any(self._blocked_in(c) is not None for c in policy):
            # TextWorld's policy goes through an entity out of reach: no route is known.
            return UNREACHABLE, []
        return len(policy), [policy[0]]

    def _graph_lookup(self) -> tuple[int, list[Any]] | None:
        """The exact oracle's ``(cost, optimal logic actions)`` from here, around the entities
        out of reach; None when the state is outside a graph that cannot grow."""
        state = self._tracker._game_progression.state
        return self._graph.lookup(state, self._marks, LIVE, self._blocked_ids())

    def _oracle_actions(self) -> list[str]:
        """Every optimal next command (exact) or TextWorld's next policy command (heuristic)."""
        return self._oracle()[1]

    def _cost_to_go(self) -> int:
        """Fewest turns to win from here (exact) or the length of TextWorld's policy (the core
        answers 0 once won, ``UNREACHABLE`` (10**6) once lost)."""
        return self._oracle()[0]

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random admissible command (for seeded exploration in tests and baselines)."""
        options = self._admissible() or ["look"]
        return options[int(rng.integers(len(options)))]


class CoinCollectorEnv(TextWorldEnv):
    """tw-coin_collector: find the coin along a chain of rooms (``level`` 1-300)."""

    family: ClassVar[str] = "coin_collector"


class TreasureHunterEnv(TextWorldEnv):
    """tw-treasure_hunter: fetch the named object, avoiding the wrong one (``level`` 1-30)."""

    family: ClassVar[str] = "treasure_hunter"


class CookingEnv(TextWorldEnv):
    """tw-cooking: read the recipe, gather, cut and cook, prepare and eat (``level`` 1-6)."""

    family: ClassVar[str] = "cooking"
