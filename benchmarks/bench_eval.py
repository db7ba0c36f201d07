"""Evaluation speed: the Pass@(K,T) surface, and the runner's overhead per step.

Run: ``.venv/bin/python -m pytest benchmarks/bench_eval.py --benchmark-only -p no:cacheprovider``

* ``pass_at_kt`` on 10,000 tasks x 64 samples for K 1..64 x T 1..200 (goal: under 1 s), against a
  straightforward ``math.comb`` loop over tasks, K and T. The loop would take minutes on the full
  surface, so it is timed on the first 20 tasks; both sides are reported per task (the ``calls``
  of each benchmark), so the ratio is the scaled comparison.
* Runner overhead: ``run_episode`` with the oracle agent (agreement bookkeeping on) against a
  plain loop that steps the same env stack with ``oracle_actions()[0]`` (goal: under 10% more per
  step). Also timed: replaying the precomputed oracle actions on the same stack, which shows how
  much of a step is the oracle itself.
"""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
from budget_envs.registry import ENV_TABLE

import budget_envs  # noqa: F401  (registers the ids)
from budget_envs.eval.agents import OracleAgent
from budget_envs.eval.metrics import pass_at_kt
from budget_envs.eval.runner import EpisodeJob, episode_seed, run_episode

TASKS, SAMPLES, T_MAX = 10_000, 64, 200
SUBSET = 20
KS = np.arange(1, SAMPLES + 1)
TS = np.arange(1, T_MAX + 1)


@pytest.fixture(scope="module")
def first_success():
    rng = np.random.default_rng(0)
    # A mix of easy and hard tasks: per-task success turns spread over 1..250, a third never.
    fs = rng.integers(1, 251, size=(TASKS, SAMPLES))
    fs[rng.random((TASKS, SAMPLES)) < 0.33] = 0
    return fs


def comb_loop(fs: np.ndarray, ks, ts) -> np.ndarray:
    """The textbook estimator, one task, K and T at a time."""
    out = np.zeros((len(ks), len(ts)))
    for row in fs.tolist():
        n = len(row)
        for j, t in enumerate(ts):
            c = sum(1 for v in row if 1 <= v <= t)
            for i, k in enumerate(ks):
                out[i, j] += 1.0 - math.comb(n - c, k) / math.comb(n, k)
    return out / len(fs)


def test_pass_at_kt_surface(benchmark, first_success):
    benchmark.extra_info.update(
        compare="pass_at_kt_per_task", role="ours", calls=TASKS, goal="full surface < 1 s"
    )
    surface = benchmark.pedantic(pass_at_kt, args=(first_success, KS, TS), rounds=5, iterations=1)
    assert surface.shape == (SAMPLES, T_MAX)
    benchmark.extra_info["full_surface_s"] = benchmark.stats.stats.min


def test_math_comb_loop_subset(benchmark, first_success):
    subset = first_success[:SUBSET]
    benchmark.extra_info.update(compare="pass_at_kt_per_task", role="baseline", calls=SUBSET)
    out = benchmark.pedantic(
        comb_loop, args=(subset, KS.tolist(), TS.tolist()), rounds=1, iterations=1
    )
    assert np.allclose(out, pass_at_kt(subset, KS, TS), atol=1e-12)
    benchmark.extra_info["scaled_full_surface_s"] = benchmark.stats.stats.min * TASKS / SUBSET


# ---------------------------------------------------------------------- runner overhead
def _family_ids() -> list[str]:
    seen, ids = set(), []
    for entry in ENV_TABLE:
        family = entry.family
        if family not in seen:
            seen.add(family)
            ids.append(entry.id)
    return ids


EPISODES = 8


@pytest.fixture(scope="module", params=_family_ids())
def stack(request):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            env = gym.make(request.param, budget=60)
        except gym.error.DependencyNotInstalled as exc:
            pytest.skip(f"{request.param}: {exc}")
    n_tasks = len(env.unwrapped.task_ids)
    tasks = [int(i) for i in np.linspace(0, n_tasks - 1, EPISODES)]
    jobs = [
        EpisodeJob(
            env_id=request.param,
            agent="oracle",
            task_index=t,
            task_id=env.unwrapped.task_ids[t],
            sample=0,
            seed=episode_seed(0, t, 0),
            budget=60,
        )
        for t in tasks
    ]
    # The steps of each episode, for the replay path and the per-step figures.
    plans = []
    for job in jobs:
        env.reset(seed=job.seed, options={"task_id": job.task_index, "budget": job.budget})
        actions = []
        while True:
            a = env.unwrapped.oracle_actions()[0]
            actions.append(a)
            _, _, term, trunc, _ = env.step(a)
            if term or trunc:
                break
        plans.append(actions)
    steps = sum(len(p) for p in plans)
    yield request.param, env, jobs, plans, steps
    env.close()


def _runner(env, jobs):
    agent = OracleAgent(seed=0, tie_break="first")  # the same actions as the plain loop
    for job in jobs:
        rec = run_episode(job, agent, env)
        if not rec.won:
            raise RuntimeError(f"oracle failed on {job.key}")


def _oracle_loop(env, jobs):
    for job in jobs:
        env.reset(seed=job.seed, options={"task_id": job.task_index, "budget": job.budget})
        unwrapped = env.unwrapped
        while True:
            _, _, term, trunc, _ = env.step(unwrapped.oracle_actions()[0])
            if term or trunc:
                break


def _replay(env, jobs, plans):
    for job, actions in zip(jobs, plans):
        env.reset(seed=job.seed, options={"task_id": job.task_index, "budget": job.budget})
        for a in actions:
            env.step(a)


def test_runner_oracle_episodes(benchmark, stack):
    env_id, env, jobs, plans, steps = stack
    benchmark.extra_info.update(
        compare=f"runner_step[{env_id}]", role="ours", calls=steps, goal="< 1.10"
    )
    benchmark.pedantic(_runner, args=(env, jobs), rounds=10, iterations=1, warmup_rounds=1)


def test_bare_oracle_loop(benchmark, stack):
    env_id, env, jobs, plans, steps = stack
    benchmark.extra_info.update(compare=f"runner_step[{env_id}]", role="baseline", calls=steps)
    benchmark.pedantic(_oracle_loop, args=(env, jobs), rounds=10, iterations=1, warmup_rounds=1)


def test_replay_without_oracle(benchmark, stack):
    env_id, env, jobs, plans, steps = stack
    benchmark.extra_info.update(steps=steps, env_id=env_id)
    benchmark.pedantic(_replay, args=(env, jobs, plans), rounds=10, iterations=1, warmup_rounds=1)
