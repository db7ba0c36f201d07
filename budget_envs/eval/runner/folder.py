"""A run folder's guards: one writer at a time (``.lock``), and a ``config.json`` that is written
whole and that ``--resume`` checks against the plan it is given.

* :class:`RunLock` holds ``<run>/.lock`` with ``fcntl.flock`` for the whole run. A second writer
  gets :class:`~budget_envs.errors.RunInUse` naming the folder and the holder's pid. The kernel
  drops the lock when its holder exits however it ends (a kill, a crash), so a lock file left by
  a dead process never blocks.
* :func:`write_config` writes ``config.json`` atomically (:func:`~budget_envs.eval.outdir.write_atomic`).
* :func:`check_resume` refuses a resume whose plan differs from the recorded one
  (:class:`~budget_envs.errors.PlanMismatch` naming each field, recorded and given). A
  ``config.json`` that is missing, empty or torn (a crash of an older version) is rewritten when
  every record of the folder belongs to the plan given, and refused when one does not.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import logging
import os
import time
import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from budget_envs.errors import PlanMismatch, RunInUse
from budget_envs.eval.outdir import out_dir_error, write_atomic
from budget_envs.eval.runner.plan import EvalPlan, TaskSelection

__all__ = [
    "LOCK_FILE",
    "RunLock",
    "check_resume",
    "writer_pid",
    "plan_config",
    "plan_differences",
    "read_config",
    "write_config",
]

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"

#: Locks this process holds; a forked child closes its copies (see :func:`_close_in_child`).
_HELD: weakref.WeakSet[RunLock] = weakref.WeakSet()
_FORK_HOOK = False


def _close_in_child() -> None:
    """In a forked child (a local worker), close the inherited lock descriptors.

    ``flock`` belongs to the open file, which a fork shares: a worker that outlived a killed
    driver for a moment would otherwise keep the folder locked. Closing the child's copy leaves
    the parent's lock as it is.
    """
    for lock in list(_HELD):
        if lock._fd is not None:
            try:
                os.close(lock._fd)
            except OSError:  # pragma: no cover - already closed
                pass
            lock._fd = None
    _HELD.clear()


class RunLock:
    """``<run_dir>/.lock``, held with ``fcntl.flock`` while a run writes the folder.

    The file stays after the run and keeps the last holder's pid; only a live holder blocks.
    Use as a context manager, or :meth:`acquire` and :meth:`release`.
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`RunInUse` (another live writer) or
        :class:`~budget_envs.errors.OutDirError` (the folder cannot take the lock file)."""
        global _FORK_HOOK
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise out_dir_error("write the run folder", self.run_dir, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder_pid(fd)
            os.close(fd)
            who = f"pid {pid}" if pid is not None else "pid unknown"
            raise RunInUse(
                f"{self.run_dir} is in use: another process ({who}) is writing this run folder "
                f"and holds {self.path}; wait for it to end or choose another folder (two "
                "writers would record every episode twice)",
                path=str(self.run_dir),
                pid=pid,
            ) from None
        except OSError as exc:  # e.g. ENOLCK on a file system without locks
            os.close(fd)
            raise out_dir_error("lock the run folder", self.run_dir, exc) from None
        try:
            os.ftruncate(fd, 0)
            data, offset = f"{os.getpid()}\n".encode(), 0
            while offset < len(data):  # a short write is retried: the next one says why
                n = os.pwrite(fd, data[offset:], offset)
                if not n:  # pragma: no cover - a raw write of 0 bytes: no room left
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                offset += n
        except OSError as exc:  # a full disk: the lock goes with the descriptor
            os.close(fd)
            raise out_dir_error("write the run folder", self.run_dir, exc) from None
        self._fd = fd
        _HELD.add(self)
        if not _FORK_HOOK:
            os.register_at_fork(after_in_child=_close_in_child)
            _FORK_HOOK = True

    def release(self) -> None:
        """Drop the lock (closing the descriptor; the file stays)."""
        _HELD.discard(self)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _holder_pid(fd: int, tries: int = 20) -> int | None:
    """The pid the lock's holder wrote (it writes it right after locking: wait a moment)."""
    for _ in range(tries):
        try:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        except OSError:  # pragma: no cover - an unreadable lock file
            return None
        if text.isdigit():
            return int(text)
        time.sleep(0.025)
    return None


def writer_pid(run_dir: str | os.PathLike[str]) -> int | None:
    """The pid of a live writer of ``run_dir`` (0 when it is unknown), None when no run is
    writing it; reads the lock without taking it, and creates nothing."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder_pid(fd) or 0
    except OSError:
        return None
    finally:
        os.close(fd)  # also drops the shared lock taken above
    return None


# ---------------------------------------------------------------------- config.json
def plan_config(plan: EvalPlan, selections: dict[str, TaskSelection]) -> dict[str, Any]:
    """The ``config.json`` of ``plan`` as the file holds it (after a JSON round trip)."""
    config = plan.to_json()
    config["task_selection"] = {e: s.to_json() for e, s in selections.items()}
    return json.loads(json.dumps(config, default=str))


def write_config(path: str | os.PathLike[str], config: dict[str, Any]) -> None:
    """Write ``config.json`` whole or not at all (:class:`~budget_envs.errors.OutDirError`)."""
    write_atomic(path, (json.dumps(config, indent=2, default=str) + "\n").encode("utf-8"))


def read_config(path: str | os.PathLike[str]) -> tuple[dict[str, Any] | None, str]:
    """``(config, "")``, or ``(None, why)`` when it is missing, empty or not a JSON object."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None, "missing"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    if not data.strip():
        return None, f"empty ({len(data)} bytes)"
    try:
        config = json.loads(data.decode("utf-8"))
    except ValueError:
        return None, "torn (not whole JSON)"
    if not isinstance(config, dict):
        return None, "not a JSON object"
    return config, ""


def _short(value: Any, width: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def plan_differences(recorded: dict[str, Any], given: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(field, recorded, given)`` for every plan field of ``given`` that ``recorded`` holds
    otherwise; ``task_selection`` is compared per env both name. A field an older config lacks
    counts as its default."""
    defaults = {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(EvalPlan)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    defaults = json.loads(json.dumps(defaults, default=str))
    out: list[tuple[str, Any, Any]] = []
    for name, value in given.items():
        if name == "task_selection":
            old = recorded.get(name) or {}
            for env_id, sel in value.items():
                if env_id in old and old[env_id] != sel:
                    out.append((f"task_selection[{env_id}]", old[env_id], sel))
            continue
        old = recorded.get(name, defaults.get(name, "(not recorded)"))
        if old != value:
            out.append((name, old, value))
    return out


def _foreign(records: Iterable[dict[str, Any]], plan: EvalPlan, jobs: Sequence[Any]) -> list[str]:
    """The keys of ``records`` that no job of ``plan`` would write (an episode or probe: the same
    key and seed; a prefix probe: a source episode of the plan, one of its agents and t)."""
    seeds = {j.key: j.seed for j in jobs}
    foreign = []
    for r in records:
        if r.get("record") == "prefix":
            ok = (
                r.get("source_key") in seeds
                and r.get("agent") in plan.agents
                and r.get("prefix_turns") in plan.prefix_turns
            )
        else:
            ok = r["key"] in seeds and r.get("seed") == seeds[r["key"]]
        if not ok:
            foreign.append(r["key"])
    return foreign


def check_resume(
    run_dir: Path,
    config_path: Path,
    config: dict[str, Any],
    records: Sequence[dict[str, Any]],
    plan: EvalPlan,
    jobs: Sequence[Any],
) -> bool:
    """Check that ``--resume`` continues the plan the folder's records were made with.

    Returns True when ``config.json`` must be (re)written: the folder has no record yet, or its
    ``config.json`` is missing, empty or torn and every record belongs to ``plan``. Raises
    :class:`PlanMismatch` when the recorded plan differs (naming each field) or cannot be known
    (a torn ``config.json`` and records ``plan`` would not write).
    """
    if not records:
        return True
    recorded, why = read_config(config_path)
    if recorded is None:
        foreign = _foreign(records, plan, jobs)
        if foreign:
            raise PlanMismatch(
                f"cannot resume {run_dir}: its {config_path.name} is {why}, so the plan its "
                f"{len(records)} records were made with cannot be known, and {len(foreign)} of "
                f"them are not jobs of the plan given (e.g. {foreign[0]!r}); resume with the "
                "options the run was started with, or choose a new folder"
            )
        logger.warning(
            "%s was %s; rewritten from the plan given: each of the run's %d records is one of "
            "its jobs (the same env, agent, task, sample, budget, fault and seed)",
            config_path,
            why,
            len(records),
        )
        return True
    diffs = plan_differences(recorded, config)
    if diffs:
        listed = "; ".join(
            f"{name}: {_short(old)} recorded, {_short(new)} given" for name, old, new in diffs
        )
        raise PlanMismatch(
            f"cannot resume {run_dir} with another plan ({len(diffs)} "
            f"{'field differs' if len(diffs) == 1 else 'fields differ'} from its "
            f"{config_path.name}: {listed}); "
            "resume with the run's own options, or choose a new folder for the new plan",
            differences=diffs,
        )
    return False
