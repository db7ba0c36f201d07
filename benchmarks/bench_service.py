"""Step latency through ``budgetmix serve`` against a trivial OpenEnv echo env served the same way.

Run: ``.venv/bin/python -m pytest benchmarks/bench_service.py --benchmark-only -s
-p no:cacheprovider``

Both servers run in their own process through the same machinery: OpenEnv's ``HTTPEnvServer``
with the same ``ConcurrencyConfig``, the service's ASGI guard (idle reaping, size limits) and
uvicorn settings (``run_app``), every env call through an
:class:`~budget_envs.service.server.EnvLane`; the clients are OpenEnv ``EnvClient`` s in this
process, ``c`` sessions at once (c = 1, 64, 256). All sessions connect and reset first; then
every session steps ``STEPS[c]`` times. Per step: latency through the server minus the
in-process step (ToolUse: a ``find_customer`` call on ``gymnasium.make(id, budget=None)``, the env
the server builds, measured in this run; echo: 0), p50 and p99, and steps per second over the
stepping phase.

The floor, ``echo``: the echo gets the same action text as ToolUse and its client parses each
answer into the echo's observation model, as an OpenEnv env's client does. ``echo-bare``, the
earlier floor, sends a 13-character action and leaves the answers as decoded dicts; the report
gives the ratio to both. The machine may be shared: the three alternate in ``ROUNDS`` rounds per
c, and the report gives every round and the medians over rounds (ratios: the median of the
rounds' ratios). Goal: ToolUse's overhead <= 1.5x the echo's at every c; p50 <= 1 ms at c=1.

Beside it, ``step us``: the session's step call (the env's step and its answer built) as the
server itself times it (``/sessions``' ``env_calls``), against the env's step in a hot loop in
process (the figure subtracted above): between two steps of a session the server runs other
messages, so the step runs with cold caches. ``/batch``: the env calls the server's lane ran per
turn of its event loop (see ``EnvLane``), on average.
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
import warnings
from pathlib import Path

import pytest

pytest.importorskip("openenv.core.env_server")

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from service_helpers import free_port, wait_until  # noqa: E402

import budget_envs  # noqa: E402, F401
from budget_envs.envs.tooluse import ToolUseEnv  # noqa: E402
from budget_envs.envs.tooluse.tools import call_json  # noqa: E402

ENV_ID = "BudgetMix/ToolUse-v0"
STEPS = {1: 2000, 64: 300, 256: 120}
ROUNDS = 5
MAX_SESSIONS = 512
ECHO_SERVER = """
import sys
from fastapi import FastAPI
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State, ConcurrencyConfig
from budget_envs.service.server import (
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_MESSAGE_BYTES, EnvLane, Guard, run_app,
)

LANE = EnvLane()

class EchoAction(Action):
    action: str
class EchoObservation(Observation):
    text: str = ""
class Echo(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True
    REQUIRES_SINGLE_THREAD_EXECUTOR = True
    def reset(self, seed=None, episode_id=None, **kw):
        return EchoObservation(text="ready", reward=0.0)
    def step(self, action, timeout_s=None, **kw):
        return EchoObservation(text=action.action, reward=0.0)
    async def reset_async(self, seed=None, episode_id=None, **kw):
        return await LANE.run("reset", lambda: self.reset(seed, episode_id, **kw))
    async def step_async(self, action, timeout_s=None, **kw):
        return await LANE.run("step", lambda: self.step(action, timeout_s, **kw))
    @property
    def state(self):
        return State()

app = FastAPI()

@app.get("/sessions")
def sessions():
    return {"env_calls": LANE.stats()}

HTTPEnvServer(Echo, EchoAction, EchoObservation,
              concurrency_config=ConcurrencyConfig(max_concurrent_envs=%(max)d,
                                                   session_timeout=DEFAULT_IDLE_TIMEOUT)
              ).register_routes(app)
app.add_middleware(Guard, idle_timeout=DEFAULT_IDLE_TIMEOUT, max_bytes=DEFAULT_MAX_MESSAGE_BYTES)
run_app(app, port=int(sys.argv[1]))
""" % {"max": MAX_SESSIONS}
OURS_SERVER = """
import sys
import budget_envs
from budget_envs.service.server import serve
serve(%(id)r, port=int(sys.argv[1]), budget=None, max_sessions=%(max)d)
""" % {"id": ENV_ID, "max": MAX_SESSIONS}


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


def _echo_client(url, typed=True):
    """An OpenEnv client of the echo. ``typed``: its answers parsed into the echo's observation
    model, as an OpenEnv env's client does (``echo-bare``: left as decoded dicts)."""
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server.types import Observation

    class EchoObservation(Observation):
        text: str = ""

    class EchoClient(EnvClient):
        def _step_payload(self, action):
            return {"action": action}

        def _parse_result(self, payload):
            if not typed:
                return StepResult(
                    observation=payload.get("observation"), reward=payload.get("reward")
                )
            obs = EchoObservation(
                **payload.get("observation", {}),
                reward=payload.get("reward"),
                done=bool(payload.get("done", False)),
            )
            return StepResult(observation=obs, reward=obs.reward, done=obs.done)

        def _parse_state(self, payload):
            return payload

    return EchoClient(base_url=url, message_timeout_s=600, connect_timeout_s=600)


def _bare_echo_client(url):
    return _echo_client(url, typed=False)


def _ours_client(url):
    from budget_envs.service import BudgetEnvClient

    return BudgetEnvClient(base_url=url, message_timeout_s=600, connect_timeout_s=600)


def _tooluse_action():
    env = ToolUseEnv(level=3)
    env.reset(options={"task_id": 0})
    return call_json("find_customer", {"email": env.task.emails[0]})


async def _load(make_client, url, sessions, steps, action_for, reset):
    """Connect and reset ``sessions`` clients, then step each ``steps`` times at once.

    No session closes before every session has stepped: closing one (its env freed on the
    server) would otherwise run between the other sessions' timed steps.
    """
    latencies: list[float] = []
    ready = finished = 0
    go, done = asyncio.Event(), asyncio.Event()

    async def one():
        nonlocal ready, finished
        async with make_client(url) as client:
            try:
                await reset(client)
                ready += 1
                if ready == sessions:
                    go.set()
                await go.wait()
                for _ in range(steps):
                    t0 = time.perf_counter()
                    await client.step(action_for())
                    latencies.append(time.perf_counter() - t0)
            except BaseException:
                go.set()  # the others must not wait for this one
                done.set()
                raise
            end = time.perf_counter()
            finished += 1
            if finished == sessions:
                done.set()
            await done.wait()
            return end

    tasks = [asyncio.ensure_future(one()) for _ in range(sessions)]
    await go.wait()
    t0 = time.perf_counter()
    ends = await asyncio.gather(*tasks)
    return latencies, max(ends) - t0


RESULTS: dict[int, list[dict[str, dict]]] = {}
IN_PROCESS_US = [float("nan")]  # the in-process step, for the report


@pytest.fixture(scope="module")
def in_process_step():
    """Median seconds of the step the server plays, on the env the server builds."""
    import gymnasium as gym

    action = _tooluse_action()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(ENV_ID, budget=None)
    env.reset(seed=0, options={"task_id": 0})
    for _ in range(200):
        env.step(action)
    times = []
    for _ in range(3000):
        t0 = time.perf_counter()
        env.step(action)
        times.append(time.perf_counter() - t0)
    env.close()
    IN_PROCESS_US[0] = statistics.median(times) * 1e6
    return statistics.median(times), action


@pytest.fixture(scope="module")
def servers():
    with _server(ECHO_SERVER) as echo, _server(OURS_SERVER) as ours:
        yield {"echo": echo, "tooluse": ours}
    _report()


def _env_calls(url):
    import requests

    calls = requests.get(url + "/sessions", timeout=30).json()["env_calls"]
    step = calls["timed"].get("step", {"runs": 0, "seconds": 0.0})
    return {**step, "inline": calls["inline"], "batches": calls["batches"]}


def _figures(lat, wall, bare, before, after):
    lat = sorted(lat)
    p50 = lat[len(lat) // 2] - bare
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] - bare
    runs = after["runs"] - before["runs"]
    served = (after["seconds"] - before["seconds"]) / runs if runs else float("nan")
    return {
        "p50_over_ms": p50 * 1e3,
        "p99_over_ms": p99 * 1e3,
        "steps_s": len(lat) / wall,
        # the env's step as timed inside the server (its inline runs), against ``bare``
        "served_step_us": served * 1e6,
        # env calls the server's lane ran per turn of its loop, on average
        "per_batch": (after["inline"] - before["inline"])
        / max(after["batches"] - before["batches"], 1),
    }


@pytest.mark.parametrize("sessions", [1, 64, 256])
def test_served_step(benchmark, servers, in_process_step, sessions):
    raw, action = in_process_step
    from budget_envs.service import BudgetAction

    async def reset_ours(client):
        await client.reset(seed=0, options={"task_id": 0})

    async def reset_echo(client):
        await client.reset()

    plans = {
        "echo": (_echo_client, 0.0, lambda: action, reset_echo),
        "echo-bare": (_bare_echo_client, 0.0, lambda: "find_customer", reset_echo),
        "tooluse": (_ours_client, raw, lambda: BudgetAction(action=action), reset_ours),
    }
    urls = {"echo": servers["echo"], "echo-bare": servers["echo"], "tooluse": servers["tooluse"]}
    steps = STEPS[sessions]
    for which, (make, _, action_for, reset) in plans.items():  # warm-up
        asyncio.run(_load(make, urls[which], sessions, max(steps // 4, 5), action_for, reset))
    rounds: list[dict[str, dict]] = []

    def one_round():
        # alternate the order, so that no env always follows the same other one
        order = list(plans) if len(rounds) % 2 == 0 else list(reversed(plans))
        row = {}
        for which in order:
            make, bare, action_for, reset = plans[which]
            before = _env_calls(urls[which])
            lat, wall = asyncio.run(_load(make, urls[which], sessions, steps, action_for, reset))
            row[which] = _figures(lat, wall, bare, before, _env_calls(urls[which]))
        rounds.append(row)

    benchmark.group = f"service-{sessions}"
    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    assert len(rounds) == ROUNDS
    RESULTS[sessions] = rounds
    benchmark.extra_info.update(_summary(rounds))


ENVS = ("echo", "echo-bare", "tooluse")
#: The floors the ToolUse overhead is divided by: the echo (the goal's floor) and the bare echo.
FLOORS = ("echo", "echo-bare")


def _summary(rounds):
    med = statistics.median
    out = {}
    for which in ENVS:
        for key in ("p50_over_ms", "p99_over_ms", "steps_s", "served_step_us", "per_batch"):
            out[f"{which}_{key}"] = med(r[which][key] for r in rounds)
    for floor in FLOORS:
        tag = "" if floor == "echo" else "_bare"
        for key in ("p50_over_ms", "p99_over_ms"):
            out[f"ratio{tag}_{key[:3]}"] = med(r["tooluse"][key] / r[floor][key] for r in rounds)
    return out


def _report():
    if not RESULTS:
        return
    lines = ["", "service step overhead (latency through the server minus the in-process step)"]
    head = (
        f"{'env':9s} {'sessions':>8s} {'round':>5s} {'p50 ms':>9s} {'p99 ms':>9s} {'steps/s':>9s}"
        f" {'step us':>8s} {'/batch':>6s}"
    )
    lines.append(head)
    for c, rounds in sorted(RESULTS.items()):
        for i, row in enumerate(rounds, 1):
            for which in ENVS:
                r = row[which]
                lines.append(
                    f"{which:9s} {c:8d} {i:5d} {r['p50_over_ms']:9.3f} {r['p99_over_ms']:9.3f} "
                    f"{r['steps_s']:9.0f} {r['served_step_us']:8.1f} {r['per_batch']:6.1f}"
                )
        s = _summary(rounds)
        for which in ENVS:
            lines.append(
                f"{which:9s} {c:8d} {'med':>5s} {s[which + '_p50_over_ms']:9.3f} "
                f"{s[which + '_p99_over_ms']:9.3f} {s[which + '_steps_s']:9.0f} "
                f"{s[which + '_served_step_us']:8.1f} {s[which + '_per_batch']:6.1f}"
            )
    lines.append("")
    for c, rounds in sorted(RESULTS.items()):
        s = _summary(rounds)
        for floor in FLOORS:
            tag = "" if floor == "echo" else "_bare"
            per = ", ".join(
                f"{r['tooluse']['p50_over_ms'] / r[floor]['p50_over_ms']:.2f}" for r in rounds
            )
            goal = " (goal <= 1.5)" if floor == "echo" else ""
            lines.append(
                f"sessions={c}: overhead ratio tooluse/{floor}, median of {len(rounds)} rounds: "
                f"p50 {s[f'ratio{tag}_p50']:.2f} (rounds: {per}), p99 {s[f'ratio{tag}_p99']:.2f}"
                f"{goal}"
            )
    lines.append(
        "step us: the env's step as timed inside the server (inline runs, medians of rounds); "
        f"in process, hot: {IN_PROCESS_US[0]:.1f} us; /batch: env calls per turn of the "
        "server's loop"
    )
    if 1 in RESULTS:
        lines.append(
            f"p50 overhead at 1 session: {_summary(RESULTS[1])['tooluse_p50_over_ms']:.3f} ms "
            "(goal <= 1 ms)"
        )
    print("\n".join(lines))
    path = os.environ.get("BUDGET_ENVS_SERVICE_BENCH")
    if path:
        Path(path).write_text(json.dumps({str(c): rounds for c, rounds in RESULTS.items()}))
