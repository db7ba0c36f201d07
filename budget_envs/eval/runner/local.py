"""The local back end: episodes fanned out over worker processes (``workers > 1``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from budget_envs.eval.runner.worker import (
    Worker,
    chunks,
    register_entries,
    registry_entries,
)

__all__ = ["iter_process"]

_PROCESS_WORKER: Worker | None = None


def _pool_init(agents: Mapping[str, Any], entries: Sequence[Any]) -> None:
    global _PROCESS_WORKER
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


def iter_process(
    jobs: list[Any],
    agents: Mapping[str, Any],
    env_kwargs: Mapping[str, Any],
    workers: int,
    chunk: int,
) -> Iterator[Any]:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    # fork: workers inherit ids registered at run time (tests, users' own envs) and the agents.
    chunk = max(chunk, async_chunk(agents))
    ctx = multiprocessing.get_context(
        "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    )
    with ProcessPoolExecutor(
        workers,
        mp_context=ctx,
        initializer=_pool_init,
        initargs=(agents, registry_entries(j.env_id for j in jobs)),
    ) as pool:
        pending = {pool.submit(_pool_chunk, c, env_kwargs) for c in chunks(jobs, chunk)}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield from fut.result()
