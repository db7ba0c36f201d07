"""The task list of a TextWorld env: generated games by (level, seed, split), or game files.

A generated task is a :class:`~.generate.GameSpec` named ``[<split>/]<family>-L<level>-s<seed>``;
a given ``.z8`` is ``file<i>-<stem>``. The games themselves are made (or found in the cache) by
the env, on first play or at construction with ``prepare=True``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs._util import check_int, check_levels, check_seeds, split_seed
from budget_envs.envs.textworld import generate as gen

__all__ = ["TaskList"]


class TaskList:
    """The task hooks of :class:`~budget_envs.core.TextAgentEnv` for the TextWorld env.

    Mixed into :class:`~budget_envs.envs.textworld.env.TextWorldEnv`, which sets ``split``,
    ``cache_dir`` and empty ``_specs`` / ``_files`` before building ``_ids`` with
    :meth:`_generated_tasks` or :meth:`_file_tasks`, and provides ``game_path``.
    """

    @staticmethod
    def _seed_list(tasks_per_level: Any, seeds: Any) -> tuple[int, ...]:
        counted = isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool)
        if counted:
            warnings.warn(
                "seeds=<count> is deprecated; use tasks_per_level= (seeds= takes a list of seeds)",
                DeprecationWarning,
                stacklevel=3,
            )
        if seeds is not None and tasks_per_level is not None:
            raise ValueError(
                f"pass tasks_per_level= or seeds=, not both (seeds={seeds!r}, "
                f"tasks_per_level={tasks_per_level!r})"
            )
        if counted:
            tasks_per_level, seeds = seeds, None
        if seeds is not None:
            return check_seeds("seeds", seeds)
        count = 10 if tasks_per_level is None else tasks_per_level
        return tuple(range(check_int("tasks_per_level", count, lo=1)))

    def _generated_tasks(self, level: Any, seed_list: tuple[int, ...]) -> list[str]:
        valid = gen.valid_levels(self.family)
        levels = (
            gen.family_levels(self.family)
            if level is None
            else check_levels(level, tuple(valid), name="level")
        )
        for lv in levels:
            gen.level_settings(self.family, lv)  # raises ValueError on a bad level
        ids = []
        prefix = "" if self.split == "train" else f"{self.split}/"
        for lv in levels:
            for s in seed_list:
                s = split_seed(s, self.split)
                spec = gen.GameSpec(self.family, lv, s)
                task = f"{prefix}{self.family}-L{lv}-s{s}"
                if task in self._specs:
                    raise ValueError(f"duplicate task {task!r} from level={level!r}")
                self._specs[task] = spec
                ids.append(task)
        return ids

    def _file_tasks(self, game_files: Any) -> list[str]:
        if isinstance(game_files, (str, os.PathLike)) or not isinstance(game_files, (list, tuple)):
            raise TypeError(f"game_files must be a list of paths, got {game_files!r}")
        if not game_files:
            raise ValueError("game_files must name at least one .z8 file, got []")
        ids = []
        for i, item in enumerate(game_files):
            path = Path(item).expanduser().resolve()
            if path.suffix != ".z8":
                raise ValueError(f"game_files entries must be .z8 files, got {str(item)!r}")
            if not path.is_file():
                raise FileNotFoundError(f"game file not found: {str(item)!r}")
            if not path.with_suffix(".json").is_file():
                raise FileNotFoundError(
                    f"{str(item)!r} has no {path.with_suffix('.json').name} beside it "
                    "(tw-make writes one; it holds the game logic)"
                )
            task = f"file{i}-{path.stem}"
            self._files[task] = path
            ids.append(task)
        return ids

    @property
    def task_ids(self) -> Sequence[str]:
        return self._ids

    def _require_task(self, task_id: str) -> None:
        if task_id not in self._specs and task_id not in self._files:
            raise ValueError(f"unknown task {task_id!r}; e.g. {list(self._ids[:3])!r}")

    def task_identity(self, task_id: str) -> tuple:
        """A digest of the game's world, entities, quests and objective (its ``.json`` without
        the generator's metadata), generating the game first if it is not cached."""
        self._require_task(task_id)
        data = json.loads(self.game_path(task_id).with_suffix(".json").read_text())
        blob = json.dumps(
            {k: data.get(k) for k in ("world", "infos", "quests", "objective")}, sort_keys=True
        )
        return ("textworld", hashlib.sha256(blob.encode()).hexdigest())

    def task_level(self, task_id: str) -> int | None:
        """The level of a generated ``task_id`` (None for a game file), the stratum of
        ``budgetmix eval --tasks N``."""
        self._require_task(task_id)
        spec = self._specs.get(task_id)
        return None if spec is None else spec.level

    def _grid(self) -> tuple[list[int], list[int]]:
        """The levels and (split-derived) seeds whose product is this env's generated tasks."""
        levels = list(dict.fromkeys(spec.level for spec in self._specs.values()))
        seeds = list(dict.fromkeys(spec.seed for spec in self._specs.values()))
        return levels, seeds

    def _prepare_command(self) -> str | None:
        """The ``budgetmix prepare`` command that makes this env's games, if there is one (the
        CLI takes a count of seeds ``0..n-1``, not an explicit list or a held-out split)."""
        levels, seeds = self._grid()
        if self.split != "train" or seeds != list(range(len(seeds))):
            return None
        command = (
            f"budgetmix prepare textworld --family {self.family} "
            f"--levels {' '.join(map(str, levels))} --tasks-per-level {len(seeds)}"
        )
        if self.cache_dir is not None:
            command += f" --cache-dir {shlex.quote(os.fspath(self.cache_dir))}"
        return command
