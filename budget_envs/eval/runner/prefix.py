"""Recovery from a failed prefix: replay the first t turns of a failed episode, let an agent play on.

A failed episode record keeps its actions (and, per turn, a digest of the observation, the
oracle cost-to-go and ``info["state_hash"]``), so its prefix can be replayed on a fresh env with
the same seed, task, budget and faults. The replay must reach the recorded state at turn t (same
observation digest, cost-to-go and state hash; ``reached``); the agent then plays the remaining
T - t turns. Success after the prefix, by t and by the prefix's damage in oracle turns
(cost-to-go after the prefix + t - the start's cost-to-go), measures recovery directly.

A plan with ``prefix_turns`` runs these probes after its episodes (:func:`plan_prefix_jobs`,
``budgetmix eval --prefix-turns``); :func:`prefix_probe` runs them on any records in process.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import gymnasium as gym

from budget_envs.eval.runner.episode import agent_error, agent_info, usage
from budget_envs.eval.runner.plan import EvalPlan, PrefixJob
from budget_envs.eval.runner.records import (
    PrefixRecord,
    first_success,
    obs_digest,
    prefix_record,
)

__all__ = [
    "PrefixJob",
    "PrefixRecord",
    "failed_sources",
    "plan_prefix_jobs",
    "prefix_jobs",
    "prefix_probe",
    "run_prefix",
]

#: The fields of a failed episode record a replay needs (a :class:`PrefixJob` carries these).
SOURCE_FIELDS = (
    "env_id",
    "key",
    "agent",
    "task_id",
    "task_index",
    "sample",
    "seed",
    "budget",
    "visibility",
    "fault_turn",
    "fault_kinds",
    "actions",
    "obs_digests",
    "costs",
    "state_hashes",
)


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


def _usable(rec: Mapping[str, Any]) -> bool:
    return (
        rec.get("record", "episode") == "episode"
        and not rec.get("error")
        and not rec.get("won")
        and bool(rec.get("actions"))
    )


def failed_sources(
    records: Sequence[Mapping[str, Any]],
    *,
    env_id: str,
    agent: str,
    min_turns: int = 1,
    episodes: int | None = None,
) -> list[Mapping[str, Any]]:
    """The failed, error-free episodes of ``agent`` on ``env_id`` longer than ``min_turns``, in
    a fixed order: dealt round-robin over the tasks (first samples first), so that ``episodes``
    of them spread over as many tasks as possible (None = all of them)."""
    mine = [
        r
        for r in records
        if r["env_id"] == env_id
        and r["agent"] == agent
        and _usable(r)
        and len(r["actions"]) > min_turns
    ]
    by_task: dict[int, list[Mapping[str, Any]]] = {}
    for r in sorted(
        mine,
        key=lambda r: (
            int(r["task_index"]),
            int(r.get("sample", 0)),
            int(r["budget"]),
            -1 if r.get("fault_turn") is None else int(r["fault_turn"]),
            str(r.get("key", "")),
        ),
    ):
        by_task.setdefault(int(r["task_index"]), []).append(r)
    out: list[Mapping[str, Any]] = []
    depth = 0
    while any(depth < len(v) for v in by_task.values()):
        out += [v[depth] for _, v in sorted(by_task.items()) if depth < len(v)]
        depth += 1
    return out if episodes is None else out[:episodes]


def plan_prefix_jobs(plan: EvalPlan, records: Sequence[Mapping[str, Any]]) -> list[PrefixJob]:
    """The prefix probes of ``plan`` over the episode ``records`` of its run: for every env,
    the source agent's failed episodes (``plan.prefix_from``, or each agent's own), at most
    ``plan.prefix_episodes`` of them, at every t of ``plan.prefix_turns`` shorter than the
    episode, played on by every agent of the plan."""
    if not plan.prefix_turns:
        return []
    turns = sorted(set(plan.prefix_turns))
    jobs: list[PrefixJob] = []
    for env_id in plan.env_ids:
        for agent in plan.agents:
            source = agent if plan.prefix_from is None else plan.prefix_from
            for rec in failed_sources(
                records,
                env_id=env_id,
                agent=source,
                min_turns=turns[0],
                episodes=plan.prefix_episodes,
            ):
                slim = {k: rec.get(k) for k in SOURCE_FIELDS}
                for t in turns:
                    if t < len(rec["actions"]):
                        jobs.append(
                            PrefixJob(env_id=env_id, agent=agent, source=slim, prefix_turns=t)
                        )
    return jobs


def run_prefix(
    rec: Mapping[str, Any], t: int, agent: Any, agent_name: str, env: gym.Env
) -> PrefixRecord:
    """Replay ``t`` turns of the failed episode ``rec`` on ``env`` (built like the episode's:
    same id, budget wrapper, visibility and faults), check it reached the recorded state, then
    let ``agent`` play until the episode ends. The agent is told the prefix as if it had played
    it (``teacher_force``). ``reached`` needs the recorded observation digest, cost-to-go and
    ``state_hash`` at turn t (each when the record holds it)."""
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
    state_hash = None
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
        hashes = rec.get("state_hashes")
        cost_t = _cost(unwrapped)
        state_hash = info.get("state_hash")
        reached = (
            turns == t
            and not (terminated or truncated)
            and digests is not None
            and len(digests) >= t
            and digests[t - 1] == obs_digest(obs)
            and (costs is None or costs[t - 1] == cost_t)
            and (hashes is None or hashes[t - 1] is None or hashes[t - 1] == state_hash)
        )
        if cost0 is not None and cost_t is not None:
            damage = cost_t + t - cost0 if cost_t < 10**6 else cost_t
        while reached and not (terminated or truncated):
            action = agent.act(obs, agent_info(info, hidden))
            obs, _, terminated, truncated, info = env.step(action)
            played.append(action if isinstance(action, str) else repr(action))
            turns += 1
        first = first_success(info.get("episode_summary"))
        stop = info.get("stop_reason")
    except Exception as exc:  # a user's agent may raise anything; record it, keep the run going
        error = agent_error(exc, agent_name, f"a prefix of {rec.get('key')}")
    job = PrefixJob(env_id=rec["env_id"], agent=agent_name, source=rec, prefix_turns=t)
    return prefix_record(
        job,
        reached=reached,
        damage=damage,
        first_success_turn=first,
        turns=turns,
        stop_reason=stop,
        wall_time=time.perf_counter() - start,
        actions=played,
        tokens=usage(agent),
        error=error,
        state_hash=state_hash,
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
