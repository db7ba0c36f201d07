"""The local back end: episodes fanned out over worker processes (``workers > 1``).

Workers never outlive their driver: each one asks the kernel for a signal when its parent dies
(``PR_SET_PDEATHSIG`` on Linux) and also polls ``os.getppid()``, so a driver killed even by
``SIGKILL`` takes its workers with it within a second. A worker that dies (killed, out of
memory) breaks the pool: the chunks it had not returned run again in a fresh pool, up to
``restarts`` times; after that their episodes are recorded with an ``error`` (``--resume``
runs them again). When the driver stops early (a full disk, Ctrl-C) the workers are ended at
once instead of finishing work nobody will record.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from budget_envs.eval.runner.records import error_record
from budget_envs.eval.runner.worker import (
    Worker,
    chunks,
    register_entries,
    registry_entries,
)

__all__ = ["iter_process", "watch_parent"]

logger = logging.getLogger(__name__)

_PROCESS_WORKER: Worker | None = None
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
#: Exit status of a worker that found its driver gone.
ORPHAN_EXIT = 70


def _poll_parent(parent: int, interval: float) -> None:
    while True:
        time.sleep(interval)
        if os.getppid() != parent:
            os._exit(ORPHAN_EXIT)


def watch_parent(parent: int, *, interval: float = 0.5, use_prctl: bool = True) -> None:
    """End this process when the process ``parent`` (its parent now) dies, however it dies.

    On Linux the kernel sends ``SIGTERM`` the moment the parent exits (``PR_SET_PDEATHSIG``,
    set through ``ctypes``); everywhere a daemon thread checks ``os.getppid()`` every
    ``interval`` seconds and exits with :data:`ORPHAN_EXIT` once the process was re-parented.
    """
    if use_prctl and sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
                logger.debug("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
        except (OSError, AttributeError):
            logger.debug("no prctl here; polling for the parent only", exc_info=True)
    if os.getppid() != parent:  # the parent died before the watch was in place
        os._exit(ORPHAN_EXIT)
    threading.Thread(
        target=_poll_parent, args=(parent, interval), name="budgetmix-parent-watch", daemon=True
    ).start()


def _pool_init(parent: int, agents: Mapping[str, Any], entries: Sequence[Any]) -> None:
    global _PROCESS_WORKER
    watch_parent(parent)
    register_entries(entries)
    _PROCESS_WORKER = Worker(agents)


def _pool_chunk(chunk: list[Any], env_kwargs: Mapping[str, Any]) -> list[Any]:
    if _PROCESS_WORKER is None:
        raise RuntimeError("worker process was not initialized (_pool_init)")
    from budget_envs.eval.runner.async_driver import run_worker_jobs

    return list(run_worker_jobs(_PROCESS_WORKER, chunk, env_kwargs))


def async_chunk(agents: Mapping[str, Any]) -> int:
    """Jobs per chunk that keep an async agent's requests in flight in a worker process: a
    chunk's episodes run concurrently, so a chunk must hold several times the concurrency."""
    from budget_envs.eval.agents import make_agent
    from budget_envs.eval.runner.async_driver import is_async_agent

    sizes = [1]
    for spec in agents.values():
        agent = make_agent(spec) if isinstance(spec, str) else spec
        if is_async_agent(agent):
            sizes.append(4 * int(getattr(agent, "concurrency", 64)))
    return max(sizes)


def _end_workers(pool: Any) -> None:
    # The executor has no public way to stop running work; end our own worker processes.
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        if proc.is_alive():
            proc.terminate()


def iter_process(
    jobs: list[Any],
    agents: Mapping[str, Any],
    env_kwargs: Mapping[str, Any],
    workers: int,
    chunk: int,
    *,
    restarts: int = 2,
    start_method: str | None = None,
) -> Iterator[Any]:
    """Run ``jobs`` in ``workers`` processes, yielding each chunk's records as it ends.

    ``start_method``: ``"fork"`` (the default where it exists: workers inherit ids registered at
    run time and the agents) or ``"spawn"``; records are the same either way.
    """
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    chunk = max(chunk, async_chunk(agents))
    if start_method is None:
        start_method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(start_method)
    entries = registry_entries(j.env_id for j in jobs)
    todo = chunks(jobs, chunk)
    attempt = 0
    while todo:
        pool = ProcessPoolExecutor(
            workers, mp_context=ctx, initializer=_pool_init, initargs=(os.getpid(), agents, entries)
        )
        finished = False
        lost: list[list[Any]] = []
        try:
            pending = {pool.submit(_pool_chunk, c, env_kwargs): c for c in todo}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    part = pending.pop(fut)
                    try:
                        records = fut.result()
                    except BrokenProcessPool:
                        lost.append(part)
                        continue
                    yield from records
            finished = True
        finally:
            if not finished or lost:
                _end_workers(pool)
            pool.shutdown(wait=True, cancel_futures=True)
        todo = lost
        if not todo:
            break
        count = sum(len(c) for c in todo)
        if attempt < restarts:
            attempt += 1
            logger.warning(
                "a worker process died; running its %d unfinished jobs again in a fresh pool "
                "(restart %d of %d)",
                count,
                attempt,
                restarts,
            )
            continue
        message = (
            f"WorkerDied: a worker process died {restarts + 1} times before this job returned; "
            "rerun with --resume"
        )
        logger.error("worker processes kept dying; %d jobs recorded as errors", count)
        for part in todo:
            for job in part:
                yield error_record(job, message)
        break
