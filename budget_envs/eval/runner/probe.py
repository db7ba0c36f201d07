"""The probe driver: single-step decisions from oracle-prefix states, into :class:`ProbeRecord`."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

from budget_envs.eval.runner.episode import agent_error, agent_info, agrees, usage
from budget_envs.eval.runner.plan import ProbeJob
from budget_envs.eval.runner.records import ProbeRecord, probe_record

__all__ = ["run_probe"]


def run_probe(job: ProbeJob, agent: Any, env: gym.Env) -> ProbeRecord:
    """Single-step probe: the oracle plays ``prefix_turns`` turns, then the agent picks one action.

    With ``job.fault`` the oracle plays one more turn with that fault armed (a slip: another
    action runs instead of the oracle's), so the agent acts from a state off the oracle's path.
    The agent is told the prefix as if it had played it (``teacher_force``). Its action is scored
    against ``oracle_actions()`` (``correct``) and by whether it lowers the oracle cost-to-go
    (``progress``; executed on a snapshot, then the state is restored).
    """
    start = time.perf_counter()
    unwrapped = env.unwrapped
    obs, info = env.reset(seed=job.seed, options={"task_id": job.task_index})
    bind = getattr(agent, "bind_oracle", None)
    if bind is not None:
        bind(unwrapped.oracle_actions)
    error = action = correct = progress = cost = effect = None
    try:
        # The env replays the task's seed; the agent gets a seed of its own per probe state, so
        # the probes of one task are independent draws rather than one draw repeated.
        agent_seed = int(
            np.random.SeedSequence([job.seed, job.prefix_turns, 0x9B0BE]).generate_state(1)[0]
        )
        agent.reset(
            env_id=job.env_id, observation=obs, info=agent_info(info, True), seed=agent_seed
        )
        done = False
        for turn in range(job.prefix_turns + (job.fault is not None)):
            best = unwrapped.oracle_actions()
            if not best:
                done = True
                break
            if turn == job.prefix_turns:  # the faulty turn after the prefix
                unwrapped.arm_fault(job.fault, np.random.default_rng([job.seed, turn, 0x0FF]))
            obs, _, terminated, _, info = env.step(best[0])
            if turn == job.prefix_turns:
                effect = (info.get("fault") or {}).get("effect")
            force = getattr(agent, "teacher_force", None)
            if force is not None:
                force(best[0], obs, agent_info(info, True))
            if terminated:
                done = True
                break
        if not done:
            best = unwrapped.oracle_actions()
            cost = int(unwrapped.cost_to_go())
            snap = unwrapped.snapshot()
            action = agent.act(obs, agent_info(info, True))
            correct = agrees(action, best)
            env.step(action)
            progress = bool(unwrapped.won or unwrapped.cost_to_go() < cost)
            unwrapped.restore(snap)
    except Exception as exc:  # a user's agent may raise anything; record it, keep the run going
        error = agent_error(exc, job.agent, job.key)
    return probe_record(
        job,
        action=action,
        correct=correct,
        progress=progress,
        cost_before=cost,
        wall_time=time.perf_counter() - start,
        tokens=usage(agent),
        error=error,
        fault_effect=effect,
    )
