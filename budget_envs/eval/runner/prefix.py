"""Recovery from a failed prefix: replay the first t turns of a failed episode, let an agent play on.

A failed episode record keeps its actions (and, per turn, a digest of the observation and the
oracle cost-to-go), so its prefix can be replayed on a fresh env with the same seed, task,
budget and faults. The replay must reach the recorded state at turn t (same observation digest
and cost-to-go; ``reached``); the agent then plays the remaining T - t turns. Success after the
prefix, by t and by the prefix's damage in oracle turns (cost-to-go after the prefix + t - the
start's cost-to-go), measures recovery directly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym

from budget_envs.eval.agents import AgentError
from budget_envs.eval.runner.episode import agent_info, usage
from budget_envs.eval.runner.records import obs_digest

__all__ = ["PrefixRecord", "prefix_jobs", "prefix_probe", "run_prefix"]

logger = logging.getLogger(__name__)


@dataclass
class PrefixRecord:
    """One prefix probe: ``agent`` plays on after ``prefix_turns`` turns of ``source``'s episode."""

    env_id: str
    task_id: str
    task_index: int
    seed: int
    budget: int
    agent: str
    source: str
    prefix_turns: int
    reached: bool
    damage: int | None
    won: bool
    first_success_turn: int | None
    turns: int
    stop_reason: str | None
    wall_time: float
    actions: list[str] | None = None
    tokens: dict[str, int] | None = None
    error: str | None = None
    key: str = ""
    record: str = "prefix"


def prefix_jobs(
    records: Sequence[Mapping[str, Any]], prefix_turns: Sequence[int]
) -> list[tuple[Mapping[str, Any], int]]:
    """(failed episode record, t) pairs: every failed, error-free episode that kept its actions,
    at every t in ``prefix_turns`` shorter than the episode."""
    out = []
    for rec in records:
        if rec.get("record", "episode") != "episode" or rec.get("error") or rec.get("won"):
            continue
        actions = rec.get("actions")
        if not actions:
            continue
        for t in prefix_turns:
            if isinstance(t, bool) or not isinstance(t, int) or t < 1:
                raise ValueError(f"prefix_turns must be ints >= 1, got {prefix_turns!r}")
            if t < len(actions):
                out.append((rec, t))
    return out


def run_prefix(
    rec: Mapping[str, Any], t: int, agent: Any, agent_name: str, env: gym.Env
) -> PrefixRecord:
    """Replay ``t`` turns of the failed episode ``rec`` on ``env`` (built like the episode's:
    same id, budget wrapper, visibility and faults), check it reached the recorded state, then
    let ``agent`` play until the episode ends. The agent is told the prefix as if it had played
    it (``teacher_force``)."""
    start = time.perf_counter()
    unwrapped = env.unwrapped
    hidden = rec.get("visibility", "hidden") == "hidden"
    obs, info = env.reset(
        seed=int(rec["seed"]),
        options={"task_id": int(rec["task_index"]), "budget": int(rec["budget"])},
    )
    cost0 = _cost(unwrapped)
    bind = getattr(agent, "bind_oracle", None)
    if bind is not None:
        bind(unwrapped.oracle_actions)
    error = None
    reached = False
    damage = None
    turns = 0
    first = None
    stop = None
    played: list[str] = []
    terminated = truncated = False
    try:
        agent.reset(
            env_id=rec["env_id"],
            observation=obs,
            info=agent_info(info, hidden),
            seed=int(rec["seed"]),
        )
        force = getattr(agent, "teacher_force", None)
        for action in rec["actions"][:t]:
            obs, _, terminated, truncated, info = env.step(action)
            turns += 1
            if force is not None:
                force(action, obs, agent_info(info, hidden))
            if terminated or truncated:
                break
        digests, costs = rec.get("obs_digests"), rec.get("costs")
        cost_t = _cost(unwrapped)
        reached = (
            turns == t
            and not (terminated or truncated)
            and digests is not None
            and len(digests) >= t
            and digests[t - 1] == obs_digest(obs)
            and (costs is None or costs[t - 1] == cost_t)
        )
        if cost0 is not None and cost_t is not None:
            damage = cost_t + t - cost0 if cost_t < 10**6 else cost_t
        while reached and not (terminated or truncated):
            action = agent.act(obs, agent_info(info, hidden))
            obs, _, terminated, truncated, info = env.step(action)
            played.append(action if isinstance(action, str) else repr(action))
            turns += 1
        summary = info.get("episode_summary") or {}
        first = summary.get("first_success_turn")
        stop = info.get("stop_reason")
    except AgentError as exc:
        error = f"AgentError: {exc}"
    except Exception as exc:  # a user's agent may raise anything; record it
        logger.exception("agent %s failed on a prefix of %s", agent_name, rec.get("key"))
        error = f"{type(exc).__name__}: {exc}"
    return PrefixRecord(
        env_id=rec["env_id"],
        task_id=rec["task_id"],
        task_index=int(rec["task_index"]),
        seed=int(rec["seed"]),
        budget=int(rec["budget"]),
        agent=agent_name,
        source=str(rec["agent"]),
        prefix_turns=t,
        reached=bool(reached),
        damage=damage,
        won=bool(reached and first is not None and error is None),
        first_success_turn=first if reached else None,
        turns=turns,
        stop_reason=stop,
        wall_time=time.perf_counter() - start,
        actions=played,
        tokens=usage(agent),
        error=error,
        key=f"prefix:{rec.get('key', '')}:t{t}:{agent_name}",
    )


def _cost(unwrapped: Any) -> int | None:
    try:
        return int(unwrapped.cost_to_go())
    except (NotImplementedError, AttributeError):
        return None


def as_dict(record: PrefixRecord) -> dict[str, Any]:
    return asdict(record)


def prefix_probe(
    records: Sequence[Mapping[str, Any]],
    agents: Mapping[str, Any],
    prefix_turns: Sequence[int],
    *,
    env_kwargs: Mapping[str, Any] | None = None,
) -> list[PrefixRecord]:
    """Every prefix probe of ``records`` for every agent (name -> spec or agent), in process.

    The env of a probe is built like its episode's: the same id, budget, visibility and (for a
    fault run) the same one fault at the same turn, seeded by the episode's reset seed, so the
    replayed prefix meets the same faults.
    """
    from budget_envs.eval.agents import make_agent
    from budget_envs.eval.runner.plan import make_env

    built = {n: make_agent(a) if isinstance(a, str) else a for n, a in agents.items()}
    envs: dict[tuple, gym.Env] = {}
    out = []
    try:
        for rec, t in prefix_jobs(records, prefix_turns):
            kinds = rec.get("fault_kinds")
            key = (rec["env_id"], rec["visibility"], rec.get("fault_turn"), tuple(kinds or ()))
            if key not in envs:
                faults = None
                if rec.get("fault_turn") is not None:
                    faults = {
                        "kinds": list(kinds or ("slip",)),
                        "at_turn": int(rec["fault_turn"]),
                        "max_faults": 1,
                    }
                envs[key] = make_env(
                    rec["env_id"],
                    visibility=rec["visibility"],
                    budget=int(rec["budget"]),
                    faults=faults,
                    **dict(env_kwargs or {}),
                )
            for name, agent in built.items():
                out.append(run_prefix(rec, t, agent, name, envs[key]))
    finally:
        for env in envs.values():
            env.close()
    return out
