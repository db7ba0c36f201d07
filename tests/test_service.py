"""``budgetmix serve``: OpenEnv's real client against the server, for every registered id.

Transcripts equal the in-process env's; 256 concurrent sessions from several client processes
do not mix; request ids are applied once; killed and idle clients' sessions are reaped; bad
input gets a clear error and leaves other sessions alone.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading

import numpy as np
import openenv.core.env_server  # noqa: E402, F401  (the openenv extra; a missing extra fails)
import pytest
from budget_envs.registry import registered_ids  # noqa: E402
from contract_helpers import make, policy_action  # noqa: E402
from service_helpers import TESTS, serving, sessions, wait_until  # noqa: E402

from budget_envs.service import BudgetAction, BudgetEnvClient, BudgetObservation, RemoteEnv  # noqa: E402

IDS = registered_ids()


def _json(value):
    return json.loads(json.dumps(value))


def play_both(env_id, url, seed, turns=8, local=None):
    """Step the in-process env and a served session with the same actions; compare each turn."""
    local = local or make(env_id)
    remote = RemoteEnv(url)
    rng = np.random.default_rng(seed)
    a = local.reset(seed=seed)
    b = remote.reset(seed=seed)
    assert b[0] == a[0] and b[1] == _json(a[1])
    info = a[1]
    played = 0
    actions = ["", "definitely not a valid action"]
    for turn in range(turns):
        action = actions[turn] if turn < len(actions) else policy_action(local, info, rng)
        a = local.step(action)
        b = remote.step(action)
        assert b[:4] == (a[0], float(a[1]), a[2], a[3]), (turn, action)
        assert b[4] == _json(a[4])
        info = a[4]
        played += 1
        if a[2] or a[3]:
            break
    remote.close()
    local.close()
    return played


@pytest.mark.parametrize("env_id", IDS)
def test_transcript_equals_in_process(env_id):
    with serving(env_id, budget=6) as url:
        assert play_both(env_id, url, seed=11, local=make(env_id, budget=6)) >= 3
        # a second episode on a fresh session: sessions are independent of earlier ones
        assert play_both(env_id, url, seed=12, local=make(env_id, budget=6)) >= 3
        # a closed socket's session is released by the server's handler, after the close
        wait_until(lambda: sessions(url)["active"] == 0, "the closed sessions to end")


def test_faults_and_visibility_are_served():
    kwargs = dict(budget=8, visibility="remaining", faults={"kinds": ["slip"], "rate": 0.5})
    with serving("BudgetMix/ToolUse-v0", **kwargs) as url:
        local = make("BudgetMix/ToolUse-v0", **kwargs)
        play_both("BudgetMix/ToolUse-v0", url, seed=3, turns=8, local=local)


CROSSTALK_WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    sys.path.insert(0, {tests!r})
    import numpy as np
    from contract_helpers import make, policy_action
    from budget_envs.service import BudgetAction, BudgetEnvClient

    async def one(url, seed, turns):
        local = make("BudgetMix/ToolUse-v0", budget=turns)
        rng = np.random.default_rng(seed)
        async with BudgetEnvClient(
            base_url=url, message_timeout_s=300, connect_timeout_s=300
        ) as client:
            obs, info = local.reset(seed=seed)
            got = await client.reset(seed=seed)
            same = got.observation.text == obs and got.observation.info["state_hash"] == info["state_hash"]
            for turn in range(turns):
                action = policy_action(local, info, rng)
                obs, reward, term, trunc, info = local.step(action)
                got = (await client.step(BudgetAction(action=action, request_id=str(turn)))).observation
                same = same and (got.text, got.reward, got.terminated, got.truncated) == (
                    obs, float(reward), term, trunc
                ) and got.info == json.loads(json.dumps(info))
                if term or trunc:
                    break
                await asyncio.sleep(0)
        return same

    async def main(url, seeds, turns):
        return await asyncio.gather(*(one(url, s, turns) for s in seeds))

    url, first, count, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(asyncio.run(main(url, range(first, first + count), turns))))
    """
)


@pytest.mark.slow
def test_256_concurrent_sessions_from_4_processes_no_crosstalk():
    """About 2 minutes on a busy 2-core machine: 4 processes x 64 sessions, 10 turns each."""
    procs_n, per, turns = 4, 64, 10
    with serving("BudgetMix/ToolUse-v0", budget=turns, max_sessions=procs_n * per) as url:
        code = CROSSTALK_WORKER.format(tests=str(TESTS))
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, url, str(k * per), str(per), str(turns)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for k in range(procs_n)
        ]
        results = []
        for p in procs:
            out, err = p.communicate(timeout=900)
            assert p.returncode == 0, err[-3000:]
            results += json.loads(out.strip().splitlines()[-1])
        assert len(results) == procs_n * per and all(results)
        wait_until(lambda: sessions(url)["active"] == 0, "sessions to close")


def test_request_id_is_applied_once():
    async def run(url):
        async with BudgetEnvClient(base_url=url) as client:
            await client.reset(seed=0, options={"task_id": 0})
            first = await client.step(BudgetAction(action="go east", request_id="a1"))
            again = await client.step(BudgetAction(action="go east", request_id="a1"))
            state = await client.state()
            fresh = await client.step(BudgetAction(action="go east", request_id="a2"))
            with pytest.raises(RuntimeError, match="already used"):
                await client.step(BudgetAction(action="go west", request_id="a1"))
            return first.observation, again.observation, state, fresh.observation

    with serving("BudgetMixTest/Toy-v0", budget=20) as url:
        first, again, state, fresh = asyncio.run(run(url))
    assert not first.replayed and again.replayed
    assert again.text == first.text and again.info == first.info
    assert state.step_count == 1 and first.info["budget"]["used"] == 1
    assert fresh.info["budget"]["used"] == 2


KILLED_CLIENT = textwrap.dedent(
    """
    import sys, time
    from budget_envs.service import RemoteEnv
    env = RemoteEnv(sys.argv[1])
    env.reset(seed=0)
    print("ready", flush=True)
    time.sleep(600)
    """
)


def test_killed_client_session_is_reaped():
    with serving("BudgetMix/ToolUse-v0", idle_timeout=600) as url:
        p = subprocess.Popen(
            [sys.executable, "-c", KILLED_CLIENT, url], stdout=subprocess.PIPE, text=True
        )
        try:
            assert p.stdout.readline().strip() == "ready"
            assert sessions(url)["active"] == 1
        finally:
            p.kill()
            p.wait()
        wait_until(lambda: sessions(url)["active"] == 0, "the killed client's session to go")


def test_sessions_route_reports_the_env_calls_run():
    with serving("BudgetMix/ToolUse-v0", idle_timeout=600) as url:
        before = sessions(url)["env_calls"]
        env = RemoteEnv(url)
        try:
            env.reset(seed=0)
            for _ in range(5):
                env.step("not a tool call")
        finally:
            env.close()
        after = sessions(url)["env_calls"]
    # the env built (always on the worker), its reset and five steps: every call counted once
    assert after["inline"] + after["worker"] - before["inline"] - before["worker"] == 7
    runs = {k: v["runs"] for k, v in after["timed"].items()}
    assert sum(runs.values()) == after["inline"]
    assert runs.get("step", 0) + runs.get("reset", 0) == after["inline"] - before["inline"]
    assert all(v["seconds"] > 0 for v in after["timed"].values() if v["runs"])


def test_idle_session_is_reaped_with_a_clear_error():
    with serving("BudgetMix/ToolUse-v0", idle_timeout=1.0) as url:
        env = RemoteEnv(url)
        env.reset(seed=0)
        assert sessions(url)["active"] == 1
        wait_until(lambda: sessions(url)["reaped"] == 1, "the idle session to be closed")
        # counted as reaped when the server tells the client; released when its handler ends
        wait_until(lambda: sessions(url)["active"] == 0, "the reaped session to end")
        with pytest.raises(RuntimeError, match="no episode yet"):
            env.step("x")


def test_bad_input_gets_clear_errors_and_spares_other_sessions():
    import requests
    from websockets.sync.client import connect

    with serving("BudgetMixTest/Toy-v0", budget=30, max_message_bytes=4096) as url:
        ws_url = url.replace("http", "ws") + "/ws"
        other = RemoteEnv(url)
        other.reset(seed=1, options={"task_id": 2})
        local = make("BudgetMixTest/Toy-v0", budget=30)
        local.reset(seed=1, options={"task_id": 2})
        with connect(ws_url) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            assert json.loads(ws.recv())["type"] == "observation"
            ws.send("{not json")
            err = json.loads(ws.recv())
            assert err["type"] == "error" and err["data"]["code"] == "INVALID_JSON"
            ws.send(json.dumps({"type": "step", "data": {"action": "go east", "x": 1}}))
            err = json.loads(ws.recv())
            assert err["data"]["code"] == "VALIDATION_ERROR"
            ws.send(json.dumps({"type": "step", "data": {"action": "y" * 10_000}}))
            err = json.loads(ws.recv())
            assert (
                err["data"]["code"] == "VALIDATION_ERROR"
                and "over the limit" in err["data"]["message"]
            )
            ws.send(json.dumps({"type": "step", "data": {"action": "go east"}}))
            ok = json.loads(ws.recv())
            assert ok["type"] == "observation"
            assert ok["data"]["observation"]["info"]["budget"]["used"] == 1  # nothing else ran
        with connect(ws_url + "?session_id=no-such-session") as ws:
            err = json.loads(ws.recv())
            assert err["type"] == "error" and "Unknown session_id" in err["data"]["message"]
        big = requests.post(url + "/step", data="x" * 10_000, timeout=10)
        assert big.status_code == 413 and "over the limit" in big.json()["detail"]
        # the other session went on untouched
        for action in ("go east", "go west", "take key"):
            assert (
                other.step(action)[:4]
                == tuple((o, float(r), t, tr) for o, r, t, tr, _ in [local.step(action)])[0]
            )
        other.close()


def test_capacity_is_enforced():
    with serving("BudgetMixTest/Toy-v0", max_sessions=2) as url:
        a, b = RemoteEnv(url), RemoteEnv(url)
        a.reset(seed=0)
        b.reset(seed=0)
        with pytest.raises(Exception, match="CAPACITY_REACHED|capacity"):
            RemoteEnv(url).reset(seed=0)
        a.close()
        b.close()


def test_serve_command_help():
    from budget_envs.cli import build_parser

    args = build_parser().parse_args(["serve", "BudgetMix/ToolUse-v0", "--max-sessions", "8"])
    assert args.max_sessions == 8 and args.host == "127.0.0.1"


def test_step_answers_leave_out_unchanged_info_and_clients_restore_it():
    from websockets.sync.client import connect

    env_id = "BudgetMix/ToolUse-v0"
    local = make(env_id, budget=10)
    _, info0 = local.reset(seed=5)
    moves = [policy_action(local, info0, np.random.default_rng(5)) for _ in range(3)]
    local.reset(seed=5)
    want = [_json(local.step(m)[4]) for m in moves]

    async def client_side(url):
        async with BudgetEnvClient(base_url=url) as client:
            await client.reset(seed=5)
            got = [
                (await client.step(BudgetAction(action=m, request_id=f"s{k}"))).observation
                for k, m in enumerate(moves)
            ]
            # an older id replayed after later steps still restores the right values
            again = (await client.step(BudgetAction(action=moves[0], request_id="s0"))).observation
            return got, again

    with serving(env_id, budget=10) as url:
        with connect(url.replace("http", "ws") + "/ws") as ws:
            # a client asks for deltas at reset, and names the answer it holds in each step
            ws.send(json.dumps({"type": "reset", "data": {"seed": 5, "info_delta": True}}))
            first = json.loads(ws.recv())["data"]["observation"]
            base = first["info_seq"]
            ws.send(json.dumps({"type": "step", "data": {"action": moves[0], "info_base": base}}))
            step = json.loads(ws.recv())["data"]["observation"]
        assert first["info"]["tools"] and first["info_delta"] is False
        assert step["info_delta"] is True and "tools" not in step["info"]
        assert step["info_base"] == base and step["info_seq"] == base + 1
        assert "task_id" not in step["info"] and "won" not in step["info"]
        assert step["info"]["turn"] == 1  # changed values travel in full
        with connect(url.replace("http", "ws") + "/ws") as ws:
            # a generic OpenEnv client (no info_delta at reset) gets every info whole
            ws.send(json.dumps({"type": "reset", "data": {"seed": 5}}))
            ws.recv()
            ws.send(json.dumps({"type": "step", "data": {"action": moves[0]}}))
            generic = json.loads(ws.recv())["data"]["observation"]
        assert generic["info_delta"] is False and generic["info"] == want[0]
        got, again = asyncio.run(client_side(url))
    assert [o.info for o in got] == want
    assert [list(o.info) for o in got] == [list(w) for w in want]  # the env's key order too
    assert not any(o.info_delta for o in got)  # restored
    assert again.replayed and again.info == want[0]

    with serving(env_id, budget=10, info_delta=False) as url:
        with connect(url.replace("http", "ws") + "/ws") as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 5, "info_delta": True}}))
            base = json.loads(ws.recv())["data"]["observation"]["info_seq"]
            ws.send(json.dumps({"type": "step", "data": {"action": moves[0], "info_base": base}}))
            whole = json.loads(ws.recv())["data"]["observation"]
        assert whole["info_delta"] is False and whole["info"] == want[0]


def test_a_caller_changing_the_info_it_got_changes_no_later_answer():
    client = BudgetEnvClient(base_url="http://127.0.0.1:1")
    info = {"turn": 0, "goal": "g", "budget": {"used": 0}, "tools": [{"name": "x"}]}
    whole = {"observation": {"text": "a", "info": info, "info_seq": 1}, "reward": 0.0}
    first = client._parse_result(whole).observation
    first.info["episode"] = {"r": 1.0}  # what a Gymnasium wrapper may add
    first.info["goal"] = "changed"
    first.info["budget"]["used"] = 99  # nested values too
    first.info["tools"].append({"name": "mine"})

    def delta():  # a decoded message (the client fills it in place), against answer 1
        return {
            "observation": {
                "text": "b",
                "info": {"turn": 1},
                "info_delta": True,
                "info_seq": 2,
                "info_base": 1,
            }
        }

    second = client._parse_result(delta()).observation
    assert second.info == {
        "turn": 1,
        "goal": "g",
        "budget": {"used": 0},
        "tools": [{"name": "x"}],
    }
    assert not second.info_delta
    fresh = BudgetEnvClient(base_url="http://127.0.0.1:1")
    with pytest.raises(RuntimeError, match="no earlier answer"):
        fresh._parse_result(delta())


def test_step_answers_built_without_validation_equal_validated_ones():
    from budget_envs.service.server import _observation

    info = {"turn": 3, "tools": [{"name": "x"}]}
    for args in (
        ("text", 1.0, True, False, info, "r1", True),
        ("", 0.0, False, True, {}, None, False),
    ):
        fast = _observation(*args)
        text, reward, terminated, truncated, inf, rid, delta = args
        slow = BudgetObservation(
            text=text,
            reward=reward,
            done=terminated or truncated,
            terminated=terminated,
            truncated=truncated,
            info=inf,
            request_id=rid,
            info_delta=delta,
        )
        assert fast == slow
        assert fast.model_dump_json() == slow.model_dump_json()
        assert fast.model_copy(update={"replayed": True}).replayed


class _Clock:
    """A clock each env call advances by the duration it names (no real time involved)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def call(self, seconds: float):
        def run():
            self.now += seconds
            return threading.current_thread().name

        return run


def test_lane_runs_cheap_calls_inline_and_slow_ones_on_its_worker():
    from budget_envs.service.server import EnvLane

    clock = _Clock()
    lane = EnvLane(inline_limit_s=0.002, window=5, probe_every=4, clock=clock)
    loop_thread = threading.current_thread().name

    async def calls(kind, seconds, n):
        return [await lane.run(kind, clock.call(seconds)) for _ in range(n)]

    async def scenario():
        cheap = await calls("step", 20e-6, 10)
        slow = await calls("build", 0.010, 9)
        return cheap, slow

    try:
        cheap, slow = asyncio.run(scenario())
    finally:
        lane.close()
    assert cheap == [loop_thread] * 10 and not lane.is_slow("step")
    # the first slow run decides; then the kind runs on the worker, probed inline every 4th call
    assert slow[0] == loop_thread and lane.is_slow("build")
    inline = [k for k, name in enumerate(slow) if name == loop_thread]
    assert inline == [0, 4, 8], slow
    assert lane.counts == {"inline": 13, "worker": 6}
    # the inline runs' time per kind, as /sessions reports it (worker runs are not timed)
    stats = lane.stats()
    assert stats["inline"] == 13 and stats["worker"] == 6
    assert stats["timed"]["step"]["runs"] == 10
    assert stats["timed"]["step"]["seconds"] == pytest.approx(10 * 20e-6)
    assert stats["timed"]["build"]["runs"] == 3
    assert stats["timed"]["build"]["seconds"] == pytest.approx(3 * 0.010)


def test_lane_keeps_a_cheap_kind_inline_through_a_few_preempted_runs():
    from budget_envs.service.server import EnvLane

    clock = _Clock()
    lane = EnvLane(inline_limit_s=0.002, window=5, clock=clock)
    loop_thread = threading.current_thread().name
    # a 20 us call now and then takes 30 ms (the process was preempted on a busy machine)
    durations = [20e-6, 0.030, 20e-6, 20e-6, 0.030, 20e-6, 20e-6, 20e-6, 0.030, 20e-6]

    async def scenario():
        return [await lane.run("step", clock.call(d)) for d in durations]

    try:
        threads = asyncio.run(scenario())
    finally:
        lane.close()
    assert threads == [loop_thread] * len(durations) and not lane.is_slow("step")
    # a kind that turns slow for good moves to the worker once most recent runs are slow
    lane = EnvLane(inline_limit_s=0.002, window=5, clock=clock)

    async def turning():
        fast = [await lane.run("step", clock.call(20e-6)) for _ in range(5)]
        slow = [await lane.run("step", clock.call(0.030)) for _ in range(5)]
        return fast, slow

    try:
        fast, slow = asyncio.run(turning())
    finally:
        lane.close()
    assert fast == [loop_thread] * 5
    assert slow[:3] == [loop_thread] * 3 and lane.is_slow("step")
    assert loop_thread not in slow[3:]


def test_lane_runs_the_calls_of_one_loop_turn_together_in_arrival_order():
    from budget_envs.service.server import EnvLane

    log: list[str] = []
    clock = _Clock()

    def call(name, seconds=20e-6, fail=False):
        def run():
            log.append(f"run {name}")
            clock.now += seconds
            if fail:
                raise ValueError(f"bad action {name}")
            return name

        return run

    async def session(lane, name, **kw):
        log.append(f"arrive {name}")
        return await lane.run("step", call(name, **kw))

    async def scenario(lane):
        return await asyncio.gather(
            *(session(lane, n, fail=n == "c") for n in "abcd"), return_exceptions=True
        )

    for batch, want in (
        (
            True,
            ["arrive a", "arrive b", "arrive c", "arrive d", "run a", "run b", "run c", "run d"],
        ),
        (
            False,
            ["arrive a", "run a", "arrive b", "run b", "arrive c", "run c", "arrive d", "run d"],
        ),
    ):
        log.clear()
        lane = EnvLane(window=5, clock=clock, batch=batch)
        try:
            got = asyncio.run(scenario(lane))
        finally:
            lane.close()
        assert log == want, batch
        # a failing call fails its own caller only
        assert got[:2] == ["a", "b"] and got[3] == "d"
        assert isinstance(got[2], ValueError) and "bad action c" in str(got[2])
        assert lane.counts == {"inline": 4, "worker": 0}


def test_lane_batch_sends_a_kind_that_turns_slow_to_the_worker_and_skips_cancelled_calls():
    from budget_envs.service.server import EnvLane

    clock = _Clock()
    lane = EnvLane(inline_limit_s=0.002, window=5, clock=clock)
    loop_thread = threading.current_thread().name

    async def scenario():
        # the first call of the batch takes 30 ms: the kind is slow from then on
        first = [asyncio.ensure_future(lane.run("build", clock.call(0.030)))]
        rest = [asyncio.ensure_future(lane.run("build", clock.call(0.030))) for _ in range(3)]
        gone = asyncio.ensure_future(lane.run("build", clock.call(0.030)))
        await asyncio.sleep(0)  # every call is queued
        gone.cancel()
        return await asyncio.gather(*first, *rest), await asyncio.gather(
            gone, return_exceptions=True
        )

    try:
        threads, (cancelled,) = asyncio.run(scenario())
    finally:
        lane.close()
    assert threads[0] == loop_thread and lane.is_slow("build")
    assert loop_thread not in threads[1:], threads
    assert isinstance(cancelled, asyncio.CancelledError)
    assert lane.counts == {"inline": 1, "worker": 3}


def test_lane_rejects_bad_arguments():
    from budget_envs.service.server import EnvLane

    with pytest.raises(ValueError, match="window must be a positive int, got 0"):
        EnvLane(window=0)
    with pytest.raises(ValueError, match="probe_every must be a positive int, got -1"):
        EnvLane(probe_every=-1)
    with pytest.raises(TypeError, match="inline_limit_s must be a number, got 'x'"):
        EnvLane(inline_limit_s="x")
