"""Chat agent throughput: the async driver at concurrency 64 against one blocking call at a time.

Run: ``.venv/bin/python -m pytest benchmarks/bench_chat.py --benchmark-only -p no:cacheprovider -s``

The server is the suite's OpenAI-compatible test server (``tests/chat_server.py``) in its own
process, answering every request after a fixed 100 ms (an asyncio sleep, so requests overlap
as on a batching server) with a valid ToolUse tool call. Both sides play the same jobs of one
plan (ToolUse-v0, 16 tasks x 8 samples, T = 2) with the same agent spec:

* ours: the in-process back end's dispatch (``run_worker_jobs``), which hands the chat agent's
  episodes to the async driver (64 requests in flight);
* baseline: :func:`budget_envs.eval.runner.run_episode` on each job in turn, the agent's
  blocking ``act`` (one request at a time, as a one-worker run did before).

Setup outside the timed call on both sides: the envs (the driver's 64 live envs are built by
one untimed run of the same jobs) and the HTTP client. Goal: at least 20x the episodes per
second. Also reported: the driver's CPU time per request
(``time.process_time`` of this process over the async run, env steps and env building included,
divided by the requests sent; goal at most 1 ms).
"""

from __future__ import annotations

import time

import pytest
from chat_server import chat_server

import budget_envs  # noqa: F401  (registers the ids)
from budget_envs.eval.runner import EvalPlan, plan_jobs, run_episode
from budget_envs.eval.runner.async_driver import run_worker_jobs
from budget_envs.eval.runner.worker import Worker

pytest.importorskip("aiohttp", reason="the chat agent needs budget-envs[chat]")

ENV_ID = "BudgetMix/ToolUse-v0"
DELAY = 0.1
CONCURRENCY = 64
FIGURES: dict[str, float] = {}


@pytest.fixture(scope="module")
def setup():
    with chat_server(delay=DELAY) as server:
        spec = f"chat:base_url={server.url},model=test-model,concurrency={CONCURRENCY}"
        plan = EvalPlan(env_ids=[ENV_ID], agents={"llm": spec}, tasks=16, samples=8, budgets=[2])
        jobs = plan_jobs(plan)
        yield spec, jobs


def _async_run(worker, jobs):
    start = time.process_time()
    records = list(run_worker_jobs(worker, jobs, {}))
    cpu = time.process_time() - start
    return records, cpu


def _blocking_run(worker, jobs):
    agent = worker.agent("llm")
    return [run_episode(job, agent, worker.env(job, job.env_id, {})) for job in jobs]


def _report() -> None:
    if {"async_s", "blocking_s"} <= set(FIGURES):
        eps = FIGURES["episodes"]
        fast, slow = eps / FIGURES["async_s"], eps / FIGURES["blocking_s"]
        print(
            f"\nbench_chat: {int(eps)} episodes, {int(FIGURES['requests'])} requests, "
            f"{DELAY * 1000:.0f} ms per reply: async (concurrency {CONCURRENCY}) "
            f"{fast:.1f} episodes/s, blocking {slow:.2f} episodes/s, ratio {fast / slow:.1f}x; "
            f"driver CPU {FIGURES['cpu_per_request_ms']:.3f} ms per request"
        )


def test_async_chat_episodes(benchmark, setup):
    spec, jobs = setup
    benchmark.extra_info.update(
        compare="chat_episodes", role="ours", calls=len(jobs), goal="< 0.05 (20x)"
    )
    worker = Worker({"llm": spec})
    _async_run(worker, jobs)  # setup: the driver's 64 live envs and the HTTP client's imports
    try:
        records, cpu = benchmark.pedantic(_async_run, args=(worker, jobs), rounds=1, iterations=1)
    finally:
        worker.close()
    assert len(records) == len(jobs) and not any(r.error for r in records)
    requests = sum(r.tokens["requests"] for r in records)
    FIGURES.update(
        episodes=len(jobs),
        requests=requests,
        async_s=benchmark.stats.stats.min,
        cpu_per_request_ms=cpu / requests * 1000,
    )
    benchmark.extra_info.update(requests=requests, cpu_per_request_ms=FIGURES["cpu_per_request_ms"])
    _report()


def test_blocking_chat_episodes(benchmark, setup):
    spec, jobs = setup
    benchmark.extra_info.update(compare="chat_episodes", role="baseline", calls=len(jobs))
    worker = Worker({"llm": spec})
    run_episode(jobs[0], worker.agent("llm"), worker.env(jobs[0], ENV_ID, {}))  # setup, as above
    try:
        records = benchmark.pedantic(_blocking_run, args=(worker, jobs), rounds=1, iterations=1)
    finally:
        worker.close()
    assert len(records) == len(jobs) and not any(r.error for r in records)
    FIGURES["blocking_s"] = benchmark.stats.stats.min
    _report()
