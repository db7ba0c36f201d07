"""The in-process back end (``workers=1``): every job in this process, on one :class:`Worker`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from budget_envs.eval.runner.async_driver import run_worker_jobs
from budget_envs.eval.runner.plan import EpisodeJob, ProbeJob
from budget_envs.eval.runner.records import EpisodeRecord, ProbeRecord
from budget_envs.eval.runner.worker import Worker

__all__ = ["run_jobs"]


def run_jobs(
    jobs: Iterable[EpisodeJob | ProbeJob],
    agents: Mapping[str, Any],
    env_kwargs: Mapping[str, Any] | None = None,
) -> Iterator[EpisodeRecord | ProbeRecord]:
    """Run ``jobs`` in this process, yielding each record as it ends: one after another, except
    the episodes of async agents (the chat agent), which the async driver plays concurrently
    (:mod:`budget_envs.eval.runner.async_driver`)."""
    worker = Worker(agents)
    try:
        yield from run_worker_jobs(worker, jobs, env_kwargs or {})
    finally:
        worker.close()
