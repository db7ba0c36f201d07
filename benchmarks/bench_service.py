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

``test_mixed_stream``: what a training client sends instead of one call repeated. Every
session plays episodes back to back, each a reset to a task no session played before in this
run (the server meets each task for the first time), then up to ``MIXED_MAX_STEPS`` steps:
about half the oracle's next call, a third a seeded random pick among
``info["candidate_actions"]``, the rest invalid (text that is no tool call, or a call naming an
id never shown). The streams are scripted in this process on the env the server builds
(the same calls the server then plays, so the rewards of every episode are checked against the
script's after the timed run). Reported beside the repeated call at the same number of sessions,
in the same run: step latency p50 and p99 (not minus anything: the steps differ), and steps/s
over the whole stream (resets included, as in training), with the same figures for the repeated
call measured right before it; the less favourable first.
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


#: Sessions and episodes per session of the mixed stream (per round).
MIXED = {1: 100, 64: 4}
MIXED_MAX_STEPS = 12
MIXED_ROUNDS = 3
#: Task ids are taken this far apart, so that consecutive episodes differ in level and ticket.
MIXED_STRIDE = 37
MIXED_RESULTS: dict[int, list[dict[str, dict]]] = {}


def _script_streams(sessions, episodes, first):
    """``sessions`` lists of ``episodes`` scripted episodes: (task id, actions, final reward),
    and the seconds the env spent in those steps in this process (a first pass too).

    Tasks ``first``, ``first + 1``, ... (times :data:`MIXED_STRIDE`, modulo the task count):
    every episode of the run gets its own task. Played in this process on the env the server
    builds; each action is the oracle's (p 0.5), a random candidate (0.35) or invalid (0.15).
    """
    import gymnasium as gym
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(ENV_ID, budget=None)
    u = env.unwrapped
    ids = u.task_ids
    streams = []
    spent = 0.0
    for s in range(sessions):
        stream = []
        for e in range(episodes):
            k = first + s * episodes + e
            tid = ids[(k * MIXED_STRIDE) % len(ids)]
            rng = np.random.default_rng(k)
            _, info = env.reset(seed=0, options={"task_id": tid})
            actions, reward = [], 0.0
            for _ in range(MIXED_MAX_STEPS):
                draw = rng.random()
                if draw < 0.5:
                    action = u.oracle_actions()[0]
                elif draw < 0.85:
                    cands = info["candidate_actions"]
                    action = cands[int(rng.integers(len(cands)))]
                elif draw < 0.93:
                    action = "cancel the order please"
                else:
                    action = call_json("get_order", {"order_id": "ord_none"})
                t0 = time.perf_counter()
                _, reward, terminated, truncated, info = env.step(action)
                spent += time.perf_counter() - t0
                actions.append(action)
                if terminated or truncated:
                    break
            stream.append((tid, actions, float(reward)))
        streams.append(stream)
    env.close()
    return streams, spent


async def _play_streams(url, streams):
    """Each session plays its stream (reset, steps) at once with the others.

    Returns the step latencies, the wall time of the whole stream (resets included), the steps
    and the final reward of every episode."""
    from budget_envs.service import BudgetAction

    latencies: list[float] = []
    resets: list[float] = []
    rewards: dict[tuple[int, int], float] = {}
    ready = 0
    go = asyncio.Event()

    async def one(s, stream):
        nonlocal ready
        async with _ours_client(url) as client:  # connected before the clock starts
            ready += 1
            if ready == len(streams):
                go.set()
            try:
                await go.wait()
                for e, (tid, actions, _) in enumerate(stream):
                    t0 = time.perf_counter()
                    await client.reset(seed=0, options={"task_id": tid})
                    resets.append(time.perf_counter() - t0)
                    result = None
                    for action in actions:
                        t0 = time.perf_counter()
                        result = await client.step(BudgetAction(action=action))
                        latencies.append(time.perf_counter() - t0)
                    rewards[(s, e)] = float(result.reward) if result is not None else 0.0
            except BaseException:
                go.set()
                raise
            return time.perf_counter()

    tasks = [asyncio.ensure_future(one(s, st)) for s, st in enumerate(streams)]
    await go.wait()
    t0 = time.perf_counter()
    ends = await asyncio.gather(*tasks)
    return latencies, max(ends) - t0, rewards, resets


def _latency_figures(lat, wall, steps, resets=()):
    lat = sorted(lat)
    return {
        "p50_ms": lat[len(lat) // 2] * 1e3,
        "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3,
        "steps_s": steps / wall,
        "steps": steps,
        "reset_p50_ms": statistics.median(resets) * 1e3 if resets else float("nan"),
        "resets": len(resets),
    }


@pytest.mark.parametrize("sessions", sorted(MIXED))
def test_mixed_stream(benchmark, servers, in_process_step, sessions):
    """A mixed episode stream (new tasks, oracle and candidate calls, invalid ones) vs the
    repeated ``find_customer`` call, through the same server, alternating."""
    from budget_envs.service import BudgetAction

    _, action = in_process_step
    url = servers["tooluse"]
    episodes = MIXED[sessions]
    per_round = sessions * episodes
    # round 0 is the warm-up; every round (and every parameter) plays tasks of its own
    offset = 1 + sum(c * MIXED[c] * (MIXED_ROUNDS + 1) for c in MIXED if c < sessions)
    scripts = [
        _script_streams(sessions, episodes, first=offset + r * per_round)
        for r in range(MIXED_ROUNDS + 1)
    ]
    in_process = sum(
        len(a) for streams, _ in scripts[1:] for st in streams for _, a, _ in st
    ) / sum(spent for _, spent in scripts[1:])
    scripts = [streams for streams, _ in scripts]
    repeat_steps = max(sum(len(a) for st in scripts[1] for _, a, _ in st) // sessions, 5)

    async def reset_ours(client):
        await client.reset(seed=0, options={"task_id": 0})

    def repeated():
        lat, wall = asyncio.run(
            _load(
                _ours_client,
                url,
                sessions,
                repeat_steps,
                lambda: BudgetAction(action=action),
                reset_ours,
            )
        )
        return _latency_figures(lat, wall, len(lat))

    def mixed(streams):
        lat, wall, rewards, resets = asyncio.run(_play_streams(url, streams))
        expected = {(s, e): ep[2] for s, st in enumerate(streams) for e, ep in enumerate(st)}
        assert rewards == expected, "the served stream's rewards differ from the script's"
        return _latency_figures(lat, wall, len(lat), resets)

    mixed(scripts[0])
    repeated()
    rounds: list[dict[str, dict]] = []

    def one_round():
        rounds.append({"repeated": repeated(), "mixed": mixed(scripts[len(rounds) + 1])})

    benchmark.group = f"service-mixed-{sessions}"
    benchmark.pedantic(one_round, rounds=MIXED_ROUNDS, iterations=1)
    assert len(rounds) == MIXED_ROUNDS
    MIXED_RESULTS[sessions] = rounds
    benchmark.extra_info["mixed_in_process_steps_s"] = in_process
    med = statistics.median
    benchmark.extra_info.update(
        {
            f"{kind}_{key}": med(r[kind][key] for r in rounds)
            for kind in ("mixed", "repeated")
            for key in ("p50_ms", "p99_ms", "steps_s")
        }
    )
    _report_mixed(sessions, rounds, in_process)


def _report_mixed(sessions, rounds, in_process):
    med = statistics.median
    summary = {
        kind: {key: med(r[kind][key] for r in rounds) for key in ("p50_ms", "p99_ms", "steps_s")}
        for kind in ("mixed", "repeated")
    }
    label = {
        "mixed": "mixed stream (new task each episode, oracle/candidate/invalid calls)",
        "repeated": "repeated find_customer call",
    }
    lines = [f"\nservice, ToolUse, {sessions} session(s), medians of {len(rounds)} rounds:"]
    for kind in sorted(summary, key=lambda k: summary[k]["steps_s"]):  # less favourable first
        f = summary[kind]
        lines.append(
            f"  {label[kind]}: {f['steps_s']:,.0f} steps/s, step p50 {f['p50_ms']:.3f} ms, "
            f"p99 {f['p99_ms']:.3f} ms"
        )
    ratio = med(r["mixed"]["steps_s"] / r["repeated"]["steps_s"] for r in rounds)
    steps, resets = rounds[0]["mixed"]["steps"], rounds[0]["mixed"]["resets"]
    reset_ms = med(r["mixed"]["reset_p50_ms"] for r in rounds)
    lines.append(
        f"  mixed / repeated steps/s: {ratio:.2f} (median of rounds; a round: {steps} mixed "
        f"steps, {resets} resets inside the stream's wall time, reset p50 {reset_ms:.3f} ms)"
    )
    lines.append(
        f"  the same mixed steps in this process (first pass, one env): {in_process:,.0f} steps/s"
    )
    print("\n".join(lines))
