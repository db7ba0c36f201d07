"""The async episode driver: one process plays many episodes at once for async agents.

An agent is async when it has ``open_episode(env_id=, observation=, info=, seed=)`` returning
an episode object whose ``act(observation, info)`` is a coroutine (the chat agent,
:class:`budget_envs.eval.chat.ChatAgent`). Such an agent's episode jobs run as asyncio tasks
in one event loop, at most ``agent.concurrency`` of them live at a time, each on an env of its
own taken from an :class:`EnvPool`; env steps run in the loop (they are short), so only the
requests overlap. Records come out as episodes end, in any order; each record is the one the
one-at-a-time driver (:func:`~budget_envs.eval.runner.episode.run_episode`) would write, since
an episode's seed, env and conversation depend on its job only.

Every other job (sync agents, single-step probes) runs through
:func:`~budget_envs.eval.runner.worker.run_one` as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import gymnasium as gym

from budget_envs.eval.runner.episode import EpisodeLog, agent_error, agent_info, turn_log, usage
from budget_envs.eval.runner.plan import EpisodeJob, ProbeJob, make_env
from budget_envs.eval.runner.records import EpisodeRecord, ProbeRecord
from budget_envs.eval.runner.worker import Worker, env_key, job_env_kwargs, run_one

__all__ = ["EnvPool", "arun_episode", "is_async_agent", "preflight_agents", "run_worker_jobs"]


def is_async_agent(agent: Any) -> bool:
    """Whether ``agent`` plays through the async driver (it has ``open_episode``)."""
    return callable(getattr(agent, "open_episode", None))


def preflight_agents(agents: Mapping[str, Any]) -> None:
    """Call every agent's ``preflight()`` (the chat agent: ``GET {base_url}/models``) before any
    episode; a :class:`~budget_envs.errors.PreflightError` stops the run before it writes, its
    message led by the agent's name in the run (``NAME`` of ``--agent NAME=SPEC``)."""
    from budget_envs.errors import PreflightError
    from budget_envs.eval.agents import make_agent

    for name, spec in agents.items():
        agent = make_agent(spec) if isinstance(spec, str) else spec
        check = getattr(agent, "preflight", None)
        if not callable(check):
            continue
        try:
            check()
        except PreflightError as exc:
            text, own = str(exc), str(getattr(agent, "name", "") or "")
            if own and text.startswith(f"{own}: "):
                text = text[len(own) + 2 :]
            raise PreflightError(f"{name}: {text}") from None
        finally:
            close = getattr(agent, "close", None)
            if callable(close):
                close()


class EnvPool:
    """Envs for live episodes: one per live episode, reused once it ends.

    The first env of a configuration is the worker's own; the others are built with what the
    first one offers to share (``env.unwrapped.shared_env_kwargs()``, e.g. the web shop's server
    URL), so many envs of one process use one web-shop server, not one each.
    """

    def __init__(self, worker: Worker, env_kwargs: Mapping[str, Any]) -> None:
        self.worker = worker
        self.env_kwargs = dict(env_kwargs)
        self._free: dict[tuple, list[gym.Env]] = {}
        self._built: dict[tuple, int] = {}
        self._siblings: list[gym.Env] = []

    def acquire(self, job: EpisodeJob) -> gym.Env:
        key = env_key(job, job.env_id)
        free = self._free.setdefault(key, [])
        if free:
            return free.pop()
        first = self.worker.env(job, job.env_id, self.env_kwargs)
        if not self._built.get(key):
            self._built[key] = 1
            return first
        share = getattr(first.unwrapped, "shared_env_kwargs", None)
        kwargs = {**self.env_kwargs, **(share() if callable(share) else {})}
        env = make_env(job.env_id, **job_env_kwargs(job), **kwargs)
        self._siblings.append(env)
        self._built[key] += 1
        return env

    def release(self, job: EpisodeJob, env: gym.Env) -> None:
        self._free.setdefault(env_key(job, job.env_id), []).append(env)

    def close(self) -> None:
        """Close the envs built here (the worker closes its own, which may own shared parts)."""
        for env in self._siblings:
            env.close()
        self._siblings.clear()
        self._free.clear()
        self._built.clear()


async def arun_episode(job: EpisodeJob, agent: Any, env: gym.Env) -> EpisodeRecord:
    """Play one episode of ``job`` with the async ``agent`` on ``env``.

    The same episode as :func:`~budget_envs.eval.runner.episode.run_episode`, with the agent's
    ``act`` awaited; agent failures end it as an error record.
    """
    log = EpisodeLog(job, env)
    unwrapped = log.unwrapped
    hidden = job.visibility == "hidden"
    error = None
    episode: Any = None
    obs, info = log.reset()
    try:
        episode = agent.open_episode(
            env_id=job.env_id, observation=obs, info=agent_info(info, hidden), seed=job.seed
        )
        done = False
        while not done:
            action = await episode.act(obs, agent_info(info, hidden))
            obs, info, done = log.step(action, unwrapped.oracle_actions)
    except Exception as exc:  # a user's agent may raise anything; record it, keep the run going
        error = agent_error(exc, job.agent, job.key)
    if episode is None:
        return log.record(error, None, None)
    return log.record(error, usage(episode), turn_log(episode))


def _iter_async(
    worker: Worker, jobs: list[EpisodeJob], env_kwargs: Mapping[str, Any]
) -> Iterator[EpisodeRecord]:
    """Run async agents' episode ``jobs`` concurrently, yielding each record as it ends.

    The event loop runs only while the caller waits for the next record, so a record is
    written (and flushed) by the caller before more episodes progress; in-flight requests
    simply wait on the server meanwhile.
    """
    loop = asyncio.new_event_loop()
    if worker.pool is None or worker.pool.env_kwargs != dict(env_kwargs):
        if worker.pool is not None:
            worker.pool.close()
        worker.pool = EnvPool(worker, env_kwargs)
    pool = worker.pool
    done: asyncio.Queue[Any] = asyncio.Queue()
    limits: dict[str, asyncio.Semaphore] = {}

    async def play(job: EpisodeJob) -> None:
        agent = worker.agent(job.agent)
        if job.agent not in limits:
            limits[job.agent] = asyncio.Semaphore(int(getattr(agent, "concurrency", 64)))
        try:
            async with limits[job.agent]:
                env = pool.acquire(job)
                try:
                    record = await arun_episode(job, agent, env)
                finally:
                    pool.release(job, env)
        except BaseException as exc:  # the env or the driver broke: the caller re-raises it
            await done.put(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        await done.put(record)

    async def close_agents() -> None:
        for name in {job.agent for job in jobs}:
            aclose = getattr(worker.agent(name), "aclose", None)
            if callable(aclose):
                await aclose()

    tasks: list[asyncio.Task[None]] = []
    try:
        tasks = [loop.create_task(play(job)) for job in jobs]
        for _ in jobs:
            item = loop.run_until_complete(done.get())
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(close_agents())
        loop.close()


def run_worker_jobs(
    worker: Worker, jobs: Iterable[EpisodeJob | ProbeJob], env_kwargs: Mapping[str, Any]
) -> Iterator[EpisodeRecord | ProbeRecord]:
    """Every job on ``worker``: async agents' episodes concurrently, the rest one at a time.

    Records are yielded as each job ends: first the one-at-a-time jobs, then the concurrent
    episodes in the order they finish.
    """
    concurrent: list[EpisodeJob] = []
    for job in jobs:
        if isinstance(job, EpisodeJob) and is_async_agent(worker.agent(job.agent)):
            concurrent.append(job)
        else:
            yield run_one(worker, job, env_kwargs)
    if concurrent:
        yield from _iter_async(worker, concurrent, env_kwargs)
