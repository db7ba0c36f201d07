"""The Ray back end: chunks of jobs as Ray tasks, on a local Ray or a cluster."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from budget_envs.errors import RayUnavailable
from budget_envs.eval.runner.worker import (
    Worker,
    chunks,
    register_entries,
    registry_entries,
    run_one,
)

__all__ = ["RayUnavailable", "connect", "iter_ray"]


def connect(address: str) -> Any:
    """Import Ray and connect: ``"local"`` starts a Ray in this machine, ``"auto"`` or an
    address joins a running cluster. Returns the ``ray`` module; an initialized Ray is kept."""
    from budget_envs._util import import_optional

    ray = import_optional("ray", extra="ray", what="the Ray back end")
    if not ray.is_initialized():
        try:
            if address == "local":
                ray.init(include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        except ConnectionError as exc:
            raise RayUnavailable(
                f"no Ray cluster at {address!r} ({str(exc).splitlines()[0] if str(exc) else exc!r}); "
                "start one with `ray start --head`, or use --ray local for a Ray on this machine"
            ) from exc
    return ray


_RAY_WORKERS: dict[str, Worker] = {}


def _ray_chunk(
    token: str,
    agents: Mapping[str, Any],
    entries: Sequence[Any],
    chunk: list[Any],
    env_kwargs: Mapping[str, Any],
) -> list[Any]:
    # Ray reuses worker processes: keep one Worker per run (token), so envs are built once.
    worker = _RAY_WORKERS.get(token)
    if worker is None:
        for old in _RAY_WORKERS.values():
            old.close()
        _RAY_WORKERS.clear()
        register_entries(entries)
        worker = _RAY_WORKERS[token] = Worker(agents)
    return [run_one(worker, job, env_kwargs) for job in chunk]


def iter_ray(
    jobs: list[Any],
    agents: Mapping[str, Any],
    env_kwargs: Mapping[str, Any],
    address: str,
    chunk: int,
) -> Iterator[Any]:
    ray = connect(address)
    remote = ray.remote(_ray_chunk)
    agents_ref = ray.put(dict(agents))
    entries_ref = ray.put(registry_entries(j.env_id for j in jobs))
    token = f"{os.getpid()}-{time.time_ns()}"
    pending = [
        remote.remote(token, agents_ref, entries_ref, c, dict(env_kwargs))
        for c in chunks(jobs, chunk)
    ]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            yield from ray.get(ref)
