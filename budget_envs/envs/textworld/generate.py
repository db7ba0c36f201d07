"""Game generation for the TextWorld family: settings per level, the on-disk cache, the timeout.

Games are made by TextWorld's own generator and compiled with its bundled Inform compilers, in a
child process (:mod:`._worker`) so that a timeout can stop it, ``PYTHONHASHSEED`` is pinned (the
cooking generator iterates over sets, so its output depends on the hash seed) and compiler scratch
files never land in the caller's working directory. A game is cached by (family, settings, seed)
and made the first time it is played; the cache is safe to share between processes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budget_envs import _util
from budget_envs.errors import GenerationError, GenerationTimeout

__all__ = [
    "CACHE_ENV_VAR",
    "FAMILIES",
    "GameSpec",
    "GenerationError",
    "GenerationTimeout",
    "cache_root",
    "ensure_game",
    "family_levels",
    "level_settings",
]

logger = logging.getLogger(__name__)

#: Environment variable naming the suite's cache root (the family uses ``<root>/textworld``).
CACHE_ENV_VAR = _util.CACHE_ENV_VAR
#: Bumped whenever the settings tables or the worker change what a (family, level, seed) means.
GENERATOR_VERSION = 3
#: Attempts per task: a seed the generator cannot use moves on to a derived seed, deterministically.
_ATTEMPTS = 3
_SEED_STRIDE = 100_003
#: State-graph size measured at generation time (``<game>.oracle.json``); see :mod:`.oracle`.
ORACLE_PROBE_STATES = 1000

FAMILIES: tuple[str, ...] = ("custom", "coin_collector", "treasure_hunter", "cooking")

# custom quests: (rooms, objects, quest length); optimal plans grow from 3 to ~25 turns (longer
# quests make TextWorld's quest generator run for minutes).
_CUSTOM = {
    1: {"nb_rooms": 1, "nb_objects": 3, "quest_length": 3},
    2: {"nb_rooms": 3, "nb_objects": 5, "quest_length": 5},
    3: {"nb_rooms": 5, "nb_objects": 8, "quest_length": 8},
    4: {"nb_rooms": 8, "nb_objects": 12, "quest_length": 14},
    5: {"nb_rooms": 12, "nb_objects": 16, "quest_length": 22},
}
# tw-cooking skills per level: recipe size, ingredients to fetch, rooms, and the skills needed.
_COOK_BASE = {"split": None, "recipe_seed": 0, "drop": False}
_COOKING = {
    1: {"recipe": 1, "take": 1, "go": 1, "open": False, "cook": False, "cut": False},
    2: {"recipe": 1, "take": 1, "go": 1, "open": True, "cook": True, "cut": False},
    3: {"recipe": 2, "take": 2, "go": 6, "open": True, "cook": True, "cut": False},
    4: {"recipe": 2, "take": 2, "go": 6, "open": True, "cook": True, "cut": True},
    5: {"recipe": 3, "take": 3, "go": 9, "open": True, "cook": True, "cut": True},
    6: {"recipe": 5, "take": 5, "go": 12, "open": True, "cook": True, "cut": True},
}
_LEVEL_RANGES = {"coin_collector": (1, 300), "treasure_hunter": (1, 30)}
_DEFAULT_LEVELS = {
    "custom": (1, 2, 3, 4, 5),
    "coin_collector": (3, 10, 20, 30, 45),
    "treasure_hunter": (5, 10, 13, 16, 20),
    "cooking": (1, 2, 3, 4, 5, 6),
}


def family_levels(family: str) -> tuple[int, ...]:
    """The levels a family plays by default (graded from a few turns to 40+)."""
    _check_family(family)
    return _DEFAULT_LEVELS[family]


def valid_levels(family: str) -> range:
    """Every level ``family`` accepts."""
    _check_family(family)
    if family == "custom":
        return range(1, max(_CUSTOM) + 1)
    if family == "cooking":
        return range(1, max(_COOKING) + 1)
    lo, hi = _LEVEL_RANGES[family]
    return range(lo, hi + 1)


def level_settings(family: str, level: int) -> dict[str, Any]:
    """TextWorld's generator settings for ``level`` of ``family``."""
    _check_family(family)
    if isinstance(level, bool) or not isinstance(level, int) or level not in valid_levels(family):
        allowed = valid_levels(family)
        raise ValueError(
            f"level for {family!r} must be an int in [{allowed.start}, {allowed.stop - 1}], "
            f"got {level!r}"
        )
    if family == "custom":
        return dict(_CUSTOM[level])
    if family == "cooking":
        return {**_COOK_BASE, **_COOKING[level]}
    return {"level": level}


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {list(FAMILIES)}, got {family!r}")


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where generated games live: the suite's cache rule for ``textworld``
    (:func:`budget_envs._util.cache_root`). Not created."""
    return _util.cache_root("textworld", cache_dir)


@dataclass(frozen=True)
class GameSpec:
    """One generated game: the family, its generator settings and the seed."""

    family: str
    level: int
    seed: int

    @property
    def settings(self) -> dict[str, Any]:
        return level_settings(self.family, self.level)

    def digest(self) -> str:
        """A short hash of everything that determines the game's bytes."""
        blob = json.dumps(
            {
                "family": self.family,
                "settings": self.settings,
                "generator": GENERATOR_VERSION,
                "textworld": _textworld_version(),
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def path(self, root: Path) -> Path:
        """The cached ``.z8`` of this game under ``root`` (the ``.json`` sits beside it)."""
        name = f"{self.family}-L{self.level}-s{self.seed}-{self.digest()}.z8"
        return root / self.family / name


def _textworld_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("textworld")
    except PackageNotFoundError:  # pragma: no cover - checked when the env is built
        return "missing"


def is_cached(spec: GameSpec, cache_dir: str | os.PathLike | None = None) -> bool:
    """Whether ``spec`` is already generated under the cache."""
    path = spec.path(cache_root(cache_dir))
    return path.is_file() and path.with_suffix(".json").is_file()


def ensure_game(
    spec: GameSpec, cache_dir: str | os.PathLike | None = None, timeout: float = 300.0
) -> Path:
    """The ``.z8`` of ``spec``, generating and caching it first if needed.

    Concurrent callers (vector-env workers) wait on a file lock instead of generating twice.
    Raises :class:`GenerationTimeout` after ``timeout`` seconds per attempt and
    :class:`GenerationError` when every attempt failed.
    """
    root = cache_root(cache_dir)
    target = spec.path(root)
    if target.is_file() and target.with_suffix(".json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _FileLock(target.with_suffix(".lock")):
        if target.is_file() and target.with_suffix(".json").is_file():
            return target
        errors = []
        for attempt in range(_ATTEMPTS):
            gen_seed = spec.seed + attempt * _SEED_STRIDE
            try:
                _generate(spec, gen_seed, target, timeout)
                return target
            except GenerationTimeout:
                raise
            except GenerationError as exc:
                logger.info("generation of %s with seed %d failed: %s", spec, gen_seed, exc)
                errors.append(str(exc))
        raise GenerationError(f"could not generate {spec} after {_ATTEMPTS} seeds: {errors[-1]}")


def _generate(spec: GameSpec, gen_seed: int, target: Path, timeout: float) -> None:
    scratch = Path(tempfile.mkdtemp(prefix=".gen-", dir=target.parent))
    try:
        request = {
            "family": spec.family,
            "settings": spec.settings,
            "seed": gen_seed,
            "out": str(scratch / "game"),
            "oracle_max_states": ORACLE_PROBE_STATES,
        }
        env = dict(os.environ, PYTHONHASHSEED="0", TMPDIR=str(scratch))
        worker = Path(__file__).with_name("_worker.py")
        logger.info("generating %s (seed %d)", spec, gen_seed)
        # A session of its own, so a timeout also stops the Inform compilers it started.
        proc = subprocess.Popen(
            [sys.executable, str(worker), json.dumps(request)],
            cwd=scratch,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc)
            raise GenerationTimeout(
                f"generating {spec} took more than {timeout:g} s (raise timeout= or pick a lower "
                "level)"
            ) from exc
        except BaseException:
            _kill_group(proc)
            raise
        if proc.returncode != 0:
            tail = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
            raise GenerationError(f"{spec}: {tail[0]}")
        made = Path(json.loads(stdout.strip().splitlines()[-1])["path"])
        # The .z8 goes last: a present .z8 means a complete game.
        verdict = made.with_suffix(".oracle.json")
        if verdict.is_file():
            os.replace(verdict, target.with_suffix(".oracle.json"))
        os.replace(made.with_suffix(".json"), target.with_suffix(".json"))
        os.replace(made, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):
        proc.kill()
    proc.communicate()


class _FileLock:
    """An exclusive advisory lock on a file (POSIX ``flock``; a no-op where unavailable)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = None

    def __enter__(self) -> _FileLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - non-POSIX
            return self
        self._fh = open(self.path, "a+")
        fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            import fcntl

            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
