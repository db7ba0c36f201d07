"""Step latency through ``budgetmix serve`` against a trivial OpenEnv echo env served the same way.

Run: ``.venv/bin/python -m pytest benchmarks/bench_service.py --benchmark-only -s
-p no:cacheprovider``

Both servers run in their own process (uvicorn, OpenEnv's ``HTTPEnvServer``, one env per
WebSocket session); the clients are OpenEnv ``EnvClient`` s in this process, ``c`` sessions
stepping at once (c = 1, 64, 256). Per step: latency through the server minus the in-process
step (ToolUse: a ``find_customer`` call measured in this run; echo: ~0), p50 and p99, and steps
per second. Goal: ToolUse's overhead <= 1.5x the echo's at every c; p50 overhead <= 1 ms at c=1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv.core.env_server")

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from service_helpers import free_port, wait_until  # noqa: E402

import budget_envs  # noqa: E402, F401
from budget_envs.envs.tooluse import ToolUseEnv  # noqa: E402
from budget_envs.envs.tooluse.tools import call_json  # noqa: E402

STEPS = {1: 2000, 64: 60, 256: 20}
ECHO_SERVER = """
import sys, uvicorn
from fastapi import FastAPI
from pydantic import Field
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State, ConcurrencyConfig

class EchoAction(Action):
    action: str
class EchoObservation(Observation):
    text: str = ""
class Echo(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True
    def reset(self, seed=None, episode_id=None, **kw):
        return EchoObservation(text="ready", reward=0.0)
    def step(self, action, timeout_s=None, **kw):
        return EchoObservation(text=action.action, reward=0.0)
    @property
    def state(self):
        return State()

app = FastAPI()
HTTPEnvServer(Echo, EchoAction, EchoObservation,
              concurrency_config=ConcurrencyConfig(max_concurrent_envs=512)).register_routes(app)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
OURS_SERVER = """
import sys
import budget_envs
from budget_envs.service.server import serve
serve("BudgetMix/ToolUse-v0", port=int(sys.argv[1]), budget=None, max_sessions=512)
"""


@contextlib.contextmanager
def _server(code):
    import requests

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", code, str(port)], env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"

    def up():
        try:
            return requests.get(url + "/health", timeout=1).ok
        except requests.RequestException:
            return False

    try:
        wait_until(up, "server", deadline_s=180)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _echo_client(url):
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient

    class EchoClient(EnvClient):
        def _step_payload(self, action):
            return {"action": action}

        def _parse_result(self, payload):
            return StepResult(observation=payload.get("observation"), reward=payload.get("reward"))

        def _parse_state(self, payload):
            return payload

    return EchoClient(base_url=url, message_timeout_s=600, connect_timeout_s=600)


def _ours_client(url):
    from budget_envs.service import BudgetEnvClient

    return BudgetEnvClient(base_url=url, message_timeout_s=600, connect_timeout_s=600)


def _tooluse_action():
    env = ToolUseEnv(level=3)
    env.reset(options={"task_id": 0})
    email = env.task.emails[0]
    return env, call_json("find_customer", {"email": email})


async def _load(make_client, url, sessions, steps, action_for):
    latencies: list[float] = []

    async def one():
        async with make_client(url) as client:
            if make_client is _ours_client:
                await client.reset(seed=0, options={"task_id": 0})
            else:
                await client.reset()
            for _ in range(steps):
                t0 = time.perf_counter()
                await client.step(action_for())
                latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(sessions)))
    return latencies, time.perf_counter() - t0


RESULTS: dict[tuple[str, int], dict] = {}


@pytest.fixture(scope="module")
def in_process_step():
    env, action = _tooluse_action()
    for _ in range(200):
        env.step(action)
    times = []
    for _ in range(3000):
        t0 = time.perf_counter()
        env.step(action)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), action


@pytest.fixture(scope="module")
def servers():
    with _server(ECHO_SERVER) as echo, _server(OURS_SERVER) as ours:
        yield {"echo": echo, "tooluse": ours}
    _report()


@pytest.mark.parametrize("sessions", [1, 64, 256])
@pytest.mark.parametrize("which", ["echo", "tooluse"])
def test_served_step(benchmark, servers, in_process_step, which, sessions):
    raw, action = in_process_step
    from budget_envs.service import BudgetAction

    if which == "echo":
        make, bare, action_for = _echo_client, 0.0, lambda: "find_customer"
    else:
        make, bare = _ours_client, raw
        action_for = lambda: BudgetAction(action=action)  # noqa: E731
    steps = STEPS[sessions]
    asyncio.run(_load(make, servers[which], sessions, max(steps // 4, 5), action_for))  # warm
    out: dict = {}

    def run():
        out["lat"], out["wall"] = asyncio.run(
            _load(make, servers[which], sessions, steps, action_for)
        )

    benchmark.group = f"service-{sessions}"
    benchmark.pedantic(run, rounds=1, iterations=1)
    lat = sorted(out["lat"])
    p50 = lat[len(lat) // 2] - bare
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] - bare
    row = {"p50_over_ms": p50 * 1e3, "p99_over_ms": p99 * 1e3, "steps_s": len(lat) / out["wall"]}
    benchmark.extra_info.update(row)
    RESULTS[(which, sessions)] = row


def _report():
    if not RESULTS:
        return
    lines = ["", "service step overhead (latency through the server minus the in-process step)"]
    lines.append(f"{'env':8s} {'sessions':>8s} {'p50 ms':>9s} {'p99 ms':>9s} {'steps/s':>9s}")
    for (which, c), r in sorted(RESULTS.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        lines.append(
            f"{which:8s} {c:8d} {r['p50_over_ms']:9.3f} {r['p99_over_ms']:9.3f} {r['steps_s']:9.0f}"
        )
    for c in sorted({c for _, c in RESULTS}):
        ours, echo = RESULTS.get(("tooluse", c)), RESULTS.get(("echo", c))
        if ours and echo:
            lines.append(
                f"sessions={c}: overhead ratio tooluse/echo p50 "
                f"{ours['p50_over_ms'] / echo['p50_over_ms']:.2f}, p99 "
                f"{ours['p99_over_ms'] / echo['p99_over_ms']:.2f} (goal <= 1.5)"
            )
    print("\n".join(lines))
    path = os.environ.get("BUDGET_ENVS_SERVICE_BENCH")
    if path:
        Path(path).write_text(json.dumps({f"{w}-{c}": r for (w, c), r in RESULTS.items()}))
