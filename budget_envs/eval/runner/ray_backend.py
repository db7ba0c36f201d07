"""The Ray back end: episodes played by env actors (an :class:`EnvActorPool`), on a local Ray
or a cluster.

The envs live in the pool's actors, one env per actor, one actor per CPU of the cluster (at
most one per job). The driver keeps one slot per env: a thread with its own copy of the agents
takes the next job, switches its env to the job's configuration (visibility, faults; each built
once per actor) and plays it with the same drivers as the local back ends
(:func:`~budget_envs.eval.runner.episode.run_episode`, :func:`~.probe.run_probe`,
:func:`~.prefix.run_prefix`) through
:meth:`EnvActorPool.env`, so the records are the local runner's (wall time aside). Agents run in
the driver (an LLM agent's requests leave from there); every env turn, oracle query and
snapshot is one actor call.
"""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from budget_envs.errors import RayUnavailable
from budget_envs.eval.runner.episode import run_episode
from budget_envs.eval.runner.plan import PrefixJob, ProbeJob
from budget_envs.eval.runner.prefix import run_prefix
from budget_envs.eval.runner.probe import run_probe
from budget_envs.eval.runner.worker import Worker
from budget_envs.service.ray_pool import EnvActorPool, connect_ray

__all__ = ["RayUnavailable", "connect", "iter_ray", "job_env"]


def connect(address: str) -> Any:
    """Import Ray and connect: ``"local"`` starts a Ray in this machine, ``"auto"`` or an
    address joins a running cluster. Returns the ``ray`` module; an initialized Ray is kept."""
    return connect_ray(address)


def _config(job: Any, env_kwargs: Mapping[str, Any]) -> str:
    # The configurations Worker.env tells apart (it reuses one env for each of them).
    if isinstance(job, ProbeJob):
        parts: tuple = (job.env_id, "bare")
    else:
        parts = (job.env_id, job.visibility, job.fault_turn, job.fault_kinds)
    return repr((parts, sorted(env_kwargs.items())))


def job_env(job: Any, env_kwargs: Mapping[str, Any]) -> Any:
    """The env a local worker builds for ``job`` (built in an actor; same code path)."""
    worker = Worker({})
    if isinstance(job, ProbeJob):
        return worker.env(None, job.env_id, env_kwargs)
    return worker.env(job, job.env_id, env_kwargs)


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_SLOT_DONE = object()


def _slot(
    pool: EnvActorPool,
    index: int,
    jobs: queue.SimpleQueue,
    out: queue.SimpleQueue,
    agents: Mapping[str, Any],
    env_kwargs: Mapping[str, Any],
    stop: threading.Event,
) -> None:
    import functools

    # Each slot plays its own episodes: agents keep per-episode state, so each gets a copy
    # (as each worker process of the local back end does).
    worker = Worker(copy.deepcopy(dict(agents)))
    current = None
    try:
        while not stop.is_set():
            try:
                job = jobs.get_nowait()
            except queue.Empty:
                break
            key = _config(job, env_kwargs)
            if key != current:
                pool.configure_with(
                    key,
                    functools.partial(job_env, job, dict(env_kwargs)),
                    [index],
                    env_ids=[job.env_id],
                )
                current = key
            env = pool.env(index)
            agent = worker.agent(job.agent)
            if isinstance(job, ProbeJob):
                out.put(run_probe(job, agent, env))
            elif isinstance(job, PrefixJob):
                out.put(run_prefix(job.source, job.prefix_turns, agent, job.agent, env))
            else:
                out.put(run_episode(job, agent, env))
    except BaseException as exc:  # handed to the driver, which re-raises it
        out.put(_Failed(exc))
    finally:
        out.put(_SLOT_DONE)


def iter_ray(
    jobs: list[Any],
    agents: Mapping[str, Any],
    env_kwargs: Mapping[str, Any],
    address: str,
    chunk: int,
    n_actors: int | None = None,
) -> Iterator[Any]:
    """Play ``jobs`` on env actors; yields each record as it ends (in finishing order).

    ``n_actors``: env actors (default: the cluster's CPUs, at most one per job). ``chunk`` is
    kept for the back ends' common signature: a slot takes the next job whenever it finishes
    one, so there is nothing to chunk.
    """
    ray = connect(address)
    if not jobs:
        return
    if n_actors is None:
        n_actors = max(1, int(ray.cluster_resources().get("CPU", 1)))
    n_actors = min(n_actors, len(jobs))
    todo: queue.SimpleQueue = queue.SimpleQueue()
    for job in jobs:
        todo.put(job)
    out: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()
    pool = EnvActorPool(None, n_actors, address=address)
    threads = [
        threading.Thread(
            target=_slot,
            args=(pool, i, todo, out, agents, dict(env_kwargs), stop),
            name=f"budget-envs-ray-slot-{i}",
            daemon=True,
        )
        for i in range(n_actors)
    ]
    try:
        for t in threads:
            t.start()
        running = len(threads)
        while running:
            item = out.get()
            if item is _SLOT_DONE:
                running -= 1
            elif isinstance(item, _Failed):
                raise item.exc
            else:
                yield item
    finally:
        stop.set()
        pool.close()
        for t in threads:
            t.join()
