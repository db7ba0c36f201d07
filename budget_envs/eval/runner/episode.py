"""The episode driver: one episode of a job, agent and env, into an :class:`EpisodeRecord`."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from budget_envs.core import TextAgentEnv
from budget_envs.eval.agents import AgentError
from budget_envs.eval.runner.plan import EpisodeJob, default_t_max, make_env
from budget_envs.eval.runner.records import (
    EpisodeRecord,
    episode_record,
    fault_record,
    first_success,
    obs_digest,
)
from budget_envs.eval.runner.shown import EpisodeShown

__all__ = ["agent_error", "agrees", "run_episode", "transcript"]

logger = logging.getLogger(__name__)

#: Keys a real agent would not see; removed from the info handed to agents.
_HIDDEN_KEYS = ("fault", "faults", "episode_summary")


def _canon(action: str) -> str:
    text = action.strip()
    if text[:1] in "{[":
        try:
            return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
        except ValueError:
            pass
    return " ".join(text.lower().split())


def agrees(action: str, best: Sequence[str]) -> bool:
    """Whether ``action`` is one of the oracle actions ``best`` (case, spacing and JSON key order
    do not matter)."""
    if action in best:
        return True
    if not isinstance(action, str):
        return False
    canon = _canon(action)
    return any(canon == _canon(b) for b in best)


def agent_info(info: Mapping[str, Any], hidden: bool) -> dict[str, Any]:
    drop = _HIDDEN_KEYS + (("budget",) if hidden else ())
    return {k: v for k, v in info.items() if k not in drop}


def usage(agent: Any) -> dict[str, int] | None:
    fn = getattr(agent, "usage", None)
    return dict(fn()) if callable(fn) else None


def turn_log(agent: Any) -> list[dict[str, Any]] | None:
    fn = getattr(agent, "turn_log", None)
    return list(fn()) if callable(fn) else None


class EpisodeLog:
    """What an episode driver keeps turn by turn, and the record it makes of it (one definition
    for the one-at-a-time and the async drivers, so their records are the same)."""

    def __init__(self, job: EpisodeJob, env: gym.Env) -> None:
        self.job = job
        self.env = env
        self.unwrapped = env.unwrapped
        self.start = time.perf_counter()
        self.track = job.track_oracle and has_oracle(self.unwrapped)
        self.agreement: list[bool | None] | None = [] if self.track else None
        self.actions: list[str] = []
        self.digests: list[str] = []
        self.costs: list[int | None] = []
        self.hashes: list[str | None] = []
        self.turns = 0
        self.info: Mapping[str, Any] = {}
        #: What the episode showed, for ``transcripts.jsonl`` (only when the job asks for it).
        self.shown: EpisodeShown | None = None

    def reset(self) -> tuple[str, Mapping[str, Any]]:
        """Reset the env to the job's task, seed and budget."""
        job = self.job
        obs, self.info = self.env.reset(
            seed=job.seed, options={"task_id": job.task_index, "budget": job.budget}
        )
        if getattr(job, "transcript", False):
            self.shown = EpisodeShown(job.env_id, obs, self.info)
        return obs, self.info

    def step(
        self, action: Any, best: Callable[[], list[str]]
    ) -> tuple[str, Mapping[str, Any], bool]:
        """Play ``action`` and log the turn (``best`` gives the oracle's actions before it);
        returns the observation, the info and whether the episode ended."""
        if self.agreement is not None:
            oracle = best()
            self.agreement.append(agrees(action, oracle) if oracle else None)
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.shown is not None:
            self.shown.turn(obs, reward, info)
        self.actions.append(action if isinstance(action, str) else repr(action))
        self.digests.append(obs_digest(obs))
        self.costs.append(int(self.unwrapped.cost_to_go()) if self.track else None)
        self.hashes.append(info.get("state_hash"))
        self.turns += 1
        self.info = info
        return obs, info, bool(terminated or truncated)

    def record(
        self, error: str | None, tokens: dict[str, int] | None, agent_turns: Any
    ) -> EpisodeRecord:
        job, info = self.job, self.info
        first = first_success(info.get("episode_summary")) if error is None else None
        record = episode_record(
            job,
            turns=self.turns,
            won=bool(first is not None),
            first_success_turn=first,
            faults=[fault_record(f) for f in info.get("faults", ())],
            oracle_agreement=self.agreement,
            wall_time=time.perf_counter() - self.start,
            tokens=tokens,
            error=error,
            agent_turns=agent_turns,
            stop_reason=info.get("stop_reason") if error is None else None,
            actions=self.actions,
            obs_digests=self.digests,
            costs=self.costs,
            state_hashes=self.hashes,
        )
        if self.shown is not None:
            record.transcript = self.shown.as_dict()
        return record


def run_episode(job: EpisodeJob, agent: Any, env: gym.Env) -> EpisodeRecord:
    """Play one episode of ``job`` with ``agent`` on ``env`` (an env made for the job's settings).

    Agent failures (:class:`AgentError`, or any exception from the agent) end the episode as an
    error record; they are never counted as a failed task.
    """
    log = EpisodeLog(job, env)
    unwrapped = log.unwrapped
    hidden = job.visibility == "hidden"
    memo: list[Any] = [-1, None]

    def oracle() -> list[str]:
        # One oracle call per turn, shared by the agent and the agreement bookkeeping.
        if memo[0] != log.turns:
            memo[0], memo[1] = log.turns, unwrapped.oracle_actions()
        return memo[1]

    bind = getattr(agent, "bind_oracle", None)
    if bind is not None:
        bind(oracle)
    error = None
    obs, info = log.reset()
    try:
        agent.reset(
            env_id=job.env_id, observation=obs, info=agent_info(info, hidden), seed=job.seed
        )
        done = False
        while not done:
            obs, info, done = log.step(agent.act(obs, agent_info(info, hidden)), oracle)
    except Exception as exc:  # a user's agent may raise anything; record it, keep the run going
        error = agent_error(exc, job.agent, job.key)
    return log.record(error, usage(agent), turn_log(agent))


def agent_error(exc: Exception, agent: str, where: str) -> str:
    """The record's ``error`` for what an agent raised during ``where`` (a job key): an
    :class:`AgentError` says what went wrong in its message; anything else (a user's agent may
    raise anything) is logged with its traceback too. The run goes on either way."""
    if isinstance(exc, AgentError):
        return f"AgentError: {exc}"
    logger.exception("agent %s failed on %s", agent, where)
    return f"{type(exc).__name__}: {exc}"


def has_oracle(unwrapped: Any) -> bool:
    """Whether the env's family fills the oracle (its ``_oracle_actions`` hook, or an override
    of the public ``oracle_actions``)."""
    cls = type(unwrapped)
    return any(
        getattr(cls, name, None) not in (None, getattr(TextAgentEnv, name))
        for name in ("_oracle_actions", "oracle_actions")
    )


def transcript(
    env_id: str,
    *,
    seed: int = 0,
    budget: int | None = None,
    max_turns: int | None = None,
    agent: Any = None,
    visibility: str = "remaining",
    task: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One episode turn by turn (default: the oracle, budget shown), for demos and docs.

    Entry 0 is the reset (``goal``, ``observation``, ``budget``); then one entry per turn with the
    action, the observation, ``budget`` accounting and, on the last one, ``episode_summary``.
    """
    from budget_envs.eval.agents import OracleAgent

    limit = budget if budget is not None else default_t_max(env_id)
    env = make_env(env_id, budget=limit, visibility=visibility, **dict(env_kwargs or {}))
    agent = agent if agent is not None else OracleAgent(seed=seed)
    bind = getattr(agent, "bind_oracle", None)
    if bind is not None:
        bind(env.unwrapped.oracle_actions)
    try:
        obs, info = env.reset(seed=seed, options={"task_id": task})
        turns = [
            {"turn": 0, "goal": info.get("goal"), "observation": obs, "budget": info.get("budget")}
        ]
        agent.reset(
            env_id=env_id,
            observation=obs,
            info=agent_info(info, visibility == "hidden"),
            seed=seed,
        )
        for t in range(1, (max_turns or limit) + 1):
            action = agent.act(obs, agent_info(info, visibility == "hidden"))
            obs, reward, terminated, truncated, info = env.step(action)
            entry = {
                "turn": t,
                "action": action,
                "observation": obs,
                "reward": float(reward),
                "budget": info.get("budget"),
                "fault": info.get("fault"),
            }
            if "episode_summary" in info:
                entry["episode_summary"] = info["episode_summary"]
            turns.append(entry)
            if terminated or truncated:
                break
        return turns
    finally:
        env.close()
