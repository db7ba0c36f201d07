"""Per-process state shared by the back ends, and one job on it (:func:`run_one`).

A :class:`Worker` builds each agent and each env configuration once and reuses them across the
jobs it runs; the in-process back end keeps one, the process-pool and Ray back ends one per
worker process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from budget_envs.eval.agents import make_agent
from budget_envs.eval.runner.episode import run_episode
from budget_envs.eval.runner.plan import EpisodeJob, PrefixJob, ProbeJob, make_env
from budget_envs.eval.runner.prefix import run_prefix
from budget_envs.eval.runner.probe import run_probe
from budget_envs.eval.runner.records import EpisodeRecord, PrefixRecord, ProbeRecord, error_record

__all__ = [
    "Worker",
    "chunks",
    "env_key",
    "job_env_kwargs",
    "registry_entries",
    "register_entries",
    "run_one",
]

logger = logging.getLogger(__name__)


class Worker:
    """Per-process state: built agents and envs, reused across jobs."""

    def __init__(self, agents: Mapping[str, Any]) -> None:
        self.agent_specs = dict(agents)
        self.agents: dict[str, Any] = {}
        self.envs: dict[tuple, gym.Env] = {}
        #: The async driver's pool of envs for live episodes (kept across chunks).
        self.pool: Any = None

    def agent(self, name: str) -> Any:
        if name not in self.agents:
            spec = self.agent_specs[name]
            agent = make_agent(spec) if isinstance(spec, str) else spec
            self.agents[name] = agent
        return self.agents[name]

    def env(
        self, job: EpisodeJob | PrefixJob | None, env_id: str, env_kwargs: Mapping[str, Any]
    ) -> gym.Env:
        key = env_key(job, env_id)
        if key not in self.envs:
            self.envs[key] = make_env(env_id, **job_env_kwargs(job), **env_kwargs)
        return self.envs[key]

    def close(self) -> None:
        if self.pool is not None:  # its envs may use a server that one of ours owns
            self.pool.close()
            self.pool = None
        for env in self.envs.values():
            env.close()
        self.envs.clear()
        for agent in self.agents.values():
            close = getattr(agent, "close", None)
            if callable(close):
                close()


def env_key(job: EpisodeJob | PrefixJob | None, env_id: str) -> tuple:
    """Jobs with the same key can share an env (reset sets the task, seed and budget); a
    prefix probe uses the env of its source episode's settings."""
    if job is None:
        return (env_id, "bare")
    return (env_id, job.visibility, job.fault_turn, job.fault_kinds)


def job_env_kwargs(job: EpisodeJob | PrefixJob | None) -> dict[str, Any]:
    """The wrapper settings of a job's env (None: the bare env of a probe)."""
    if job is None:
        return {"budget": None}
    faults = None
    if job.fault_turn is not None:
        faults = {
            "kinds": list(job.fault_kinds or ("slip",)),
            "at_turn": job.fault_turn,
            "max_faults": 1,
        }
    return {"visibility": job.visibility, "budget": job.budget, "faults": faults}


def run_one(
    worker: Worker, job: EpisodeJob | ProbeJob | PrefixJob, env_kwargs: Mapping[str, Any]
) -> EpisodeRecord | ProbeRecord | PrefixRecord:
    """Run one job. A failure outside the agent's turns (the env cannot be built or reset, e.g.
    its server is gone) is the job's error record, not the end of the run."""
    try:
        agent = worker.agent(job.agent)
        if isinstance(job, ProbeJob):
            return run_probe(job, agent, worker.env(None, job.env_id, env_kwargs))
        if isinstance(job, PrefixJob):
            env = worker.env(job, job.env_id, env_kwargs)
            return run_prefix(job.source, job.prefix_turns, agent, job.agent, env)
        return run_episode(job, agent, worker.env(job, job.env_id, env_kwargs))
    except Exception as exc:  # recorded with its cause; --resume runs the job again
        logger.warning("%s failed before it could play: %s: %s", job.key, type(exc).__name__, exc)
        return error_record(job, f"{type(exc).__name__}: {exc}")


def register_entries(entries: Sequence[Any]) -> None:
    from budget_envs.registry import register_env

    for entry in entries:
        register_env(entry)


def chunks(jobs: list[Any], size: int) -> list[list[Any]]:
    return [jobs[i : i + size] for i in range(0, len(jobs), size)]


def registry_entries(env_ids: Iterable[str]) -> list[Any]:
    from budget_envs.registry import entry_for

    return [entry_for(e) for e in sorted(set(env_ids))]
