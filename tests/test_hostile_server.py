"""Hostile clients against a real ``budgetmix serve`` (a subprocess on a free loopback port).

Each attack of the red-team pass ends in a clear error; a bystander session (a ``RemoteEnv``
stepped beside the in-process env) keeps stepping with answers equal to the in-process env's;
and the server's memory stays bounded: its resident memory (``VmRSS``, and the peak ``VmHWM``,
from ``/proc/<pid>/status``) grows by less than a generous limit over the attack. The figures
are printed (``-s`` shows them). No timings are asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import openenv.core.env_server  # noqa: E402, F401  (the openenv extra; a missing extra fails)
import pytest
import requests
from contract_helpers import make, policy_action  # noqa: E402
from service_helpers import (  # noqa: E402
    budgetmix_serve,
    free_port,
    proc_status_kb,
    sessions,
    wait_until,
)
from websockets.sync.client import connect  # noqa: E402

from budget_envs.service import BudgetAction, BudgetEnvClient, RemoteEnv  # noqa: E402

ENV_ID = "BudgetMix/ToolUse-v0"
BUDGET = 1000  # long episodes: attacks step well past a usual budget
MAX_SESSIONS = 96
HTTP_CAP = MAX_SESSIONS // 4
QUICK_IDLE_S = 2.0
#: Generous bound on the server's memory growth over one attack, in KiB.
GROWTH_LIMIT_KB = 64 * 1024


def _json(value):
    return json.loads(json.dumps(value))


@pytest.fixture(scope="module")
def server():
    """The server most attacks run against (96 sessions; 24 over HTTP)."""
    with budgetmix_serve(
        ENV_ID,
        *("--budget", str(BUDGET), "--max-sessions", str(MAX_SESSIONS), "--idle-timeout", "300"),
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def quick():
    """A server whose idle timeout (and unattached /mcp sessions' life) is 2 s, 8 sessions."""
    with budgetmix_serve(
        ENV_ID,
        *("--budget", str(BUDGET), "--max-sessions", "8", "--idle-timeout", str(QUICK_IDLE_S)),
    ) as srv:
        yield srv


class Bystander:
    """A session of an honest client, stepped beside the in-process env: every answer equal."""

    def __init__(self, url: str, seed: int = 0) -> None:
        self.remote = RemoteEnv(url, message_timeout_s=300)
        self.local = make(ENV_ID, budget=BUDGET)
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.turns = 0
        self._reset()

    def _reset(self) -> None:
        a = self.local.reset(seed=self.seed)
        b = self.remote.reset(seed=self.seed)
        assert b[0] == a[0] and b[1] == _json(a[1])
        self.info = a[1]

    def check(self, turns: int = 3) -> None:
        for _ in range(turns):
            action = policy_action(self.local, self.info, self.rng)
            a = self.local.step(action)
            b = self.remote.step(action)
            assert b[:4] == (a[0], float(a[1]), a[2], a[3]), (self.turns, action)
            assert b[4] == _json(a[4]), self.turns
            self.info = a[4]
            self.turns += 1
            if a[2] or a[3]:
                self.seed += 1
                self._reset()

    def close(self) -> None:
        self.remote.close()
        self.local.close()


@pytest.fixture
def bystander(server):
    by = Bystander(server.url)
    by.check()
    yield by
    by.check()  # still stepping right after the attack
    by.close()


class Memory:
    """The server's resident memory and its peak, before and after an attack (KiB)."""

    def __init__(self, srv, what: str) -> None:
        self.srv, self.what = srv, what
        self.rss0 = srv.rss_kb()
        self.hwm0 = proc_status_kb(srv.proc.pid, "VmHWM")

    def check(self, limit_kb: int = GROWTH_LIMIT_KB) -> None:
        rss1 = self.srv.rss_kb()
        hwm1 = proc_status_kb(self.srv.proc.pid, "VmHWM")
        print(
            f"\n[memory] {self.what}: VmRSS {self.rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB "
            f"({(rss1 - self.rss0) / 1024:+.1f}), VmHWM {self.hwm0 / 1024:.1f} -> "
            f"{hwm1 / 1024:.1f} MiB ({(hwm1 - self.hwm0) / 1024:+.1f})"
        )
        assert rss1 - self.rss0 < limit_kb, (self.rss0, rss1)
        assert hwm1 - self.hwm0 < limit_kb, (self.hwm0, hwm1)


def rpc(url: str, method: str, rid: int = 1, **params):
    body = {"jsonrpc": "2.0", "method": method, "id": rid, "params": params}
    return requests.post(url + "/mcp", json=body, timeout=30).json()


def ask(ws, message, timeout: float = 120):
    """Send one message (a dict as JSON, or raw text / bytes) and return the decoded answer."""
    ws.send(json.dumps(message) if isinstance(message, dict) else message)
    return json.loads(ws.recv(timeout=timeout))


def _free_ws_slots(url: str) -> int:
    return MAX_SESSIONS - sessions(url)["active"]


# ------------------------------------------------------------------------- capacity and routes
def test_mcp_session_flood_takes_no_websocket_slot(server, bystander):
    memory = Memory(server, "64 /mcp session/create, then every WebSocket slot")
    answers = [rpc(server.url, "openenv/session/create", k) for k in range(64)]
    made = [a["result"]["session_id"] for a in answers if "result" in a]
    refused = [a["error"] for a in answers if "error" in a]
    assert len(made) == HTTP_CAP and len(refused) == 64 - HTTP_CAP
    assert all("sessions made over HTTP" in e["message"] for e in refused)
    assert all(e["data"]["max_sessions"] == HTTP_CAP for e in refused)
    status = sessions(server.url)
    assert status["http"] == {"active": HTTP_CAP, "max": HTTP_CAP}
    # WebSocket clients still get every one of their slots
    free = _free_ws_slots(server.url)
    assert free == MAX_SESSIONS - 1  # the bystander holds one
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(connect(server.ws_url)) for _ in range(free)]
        for ws in socks:
            assert ask(ws, {"type": "state"})["type"] == "state"
        with connect(server.ws_url) as extra:
            err = json.loads(extra.recv(timeout=60))
        assert err["type"] == "error" and err["data"]["code"] == "CAPACITY_REACHED"
        assert "WebSocket sessions" in err["data"]["message"]
        assert sessions(server.url)["active"] == MAX_SESSIONS
        bystander.check()
    for k, sid in enumerate(made):  # unattached: anyone holding the id may close it
        assert rpc(server.url, "openenv/session/close", k, session_id=sid)["result"]["closed"]
    wait_until(lambda: sessions(server.url)["active"] == 1, "the sockets' sessions to end")
    assert sessions(server.url)["http"]["active"] == 0
    memory.check()


def test_unattached_mcp_sessions_expire_whatever_names_them(quick):
    by = Bystander(quick.url)
    made = [rpc(quick.url, "openenv/session/create", k)["result"]["session_id"] for k in (1, 2)]
    third = rpc(quick.url, "openenv/session/create", 3)
    assert third["error"]["data"] == {"active_sessions": 2, "max_sessions": 2}
    expired0 = sessions(quick.url)["expired"]
    calls = []

    def gone():
        # one tools/list per session per poll, far more often than the expiry: no help
        for sid in made:
            answer = rpc(quick.url, "tools/list", session_id=sid)
            calls.append(answer)
            assert "no MCP tools" in answer["error"]["message"]
        by.check(1)  # (often enough to outlive the 2 s idle timeout)
        return sessions(quick.url)["http"]["active"] == 0

    wait_until(gone, "the unattached /mcp sessions to expire", deadline_s=120, every_s=0.2)
    assert len(calls) >= 2 and sessions(quick.url)["expired"] == expired0 + 2
    with connect(quick.ws_url + "?session_id=" + made[0]) as late:
        err = json.loads(late.recv(timeout=60))
    assert err["data"]["code"] == "SESSION_ERROR" and "Unknown session_id" in err["data"]["message"]
    by.check()
    by.close()


def test_a_session_held_by_a_socket_belongs_to_it(server, bystander):
    local = make(ENV_ID, budget=BUDGET)
    _, info = local.reset(seed=3)
    rng = np.random.default_rng(3)
    moves = [policy_action(local, info, rng) for _ in range(2)]
    local.reset(seed=3)
    want = [_json(local.step(m)[4]) for m in moves]
    with connect(server.ws_url) as victim:
        assert ask(victim, {"type": "reset", "data": {"seed": 3}})["type"] == "observation"
        first = ask(victim, {"type": "step", "data": {"action": moves[0]}})
        assert first["data"]["observation"]["info"] == want[0]
        create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"}
        own = ask(victim, {"type": "mcp", "data": create})["data"]["result"]["session_id"]
        # nobody else attaches to it...
        with connect(server.ws_url + "?session_id=" + own) as thief:
            err = json.loads(thief.recv(timeout=60))
        assert err["data"]["code"] == "SESSION_ERROR"
        assert "belongs to another connection" in err["data"]["message"]
        # ... or closes it, over HTTP or another socket
        answer = rpc(server.url, "openenv/session/close", session_id=own)
        assert "held by a connection" in answer["error"]["message"]
        with connect(server.ws_url) as other:
            close = {"jsonrpc": "2.0", "id": 2, "method": "openenv/session/close"}
            close["params"] = {"session_id": own}
            answer = ask(other, {"type": "mcp", "data": close})["data"]
        assert "held by a connection" in answer["error"]["message"]
        # its own socket closes it with a close message, not over MCP
        close["params"] = {"session_id": own}
        answer = ask(victim, {"type": "mcp", "data": close})["data"]
        assert "send" in answer["error"]["message"]
        # the session is as it was: the next step is the second turn of its own episode
        second = ask(victim, {"type": "step", "data": {"action": moves[1]}})
        assert second["data"]["observation"]["info"] == want[1]
    # every live env is counted, whatever route made it
    wait_until(lambda: sessions(server.url)["active"] == 1, "the victim's session to end")
    # its env closes on the lane after the session leaves the table: it goes, the bystander's stays
    wait_until(lambda: sessions(server.url)["envs"] == 1, "the victim's env to close")
    assert sessions(server.url)["active"] == 1
    local.close()


def test_a_session_made_over_mcp_is_attached_once(server, bystander):
    sid = rpc(server.url, "openenv/session/create")["result"]["session_id"]
    url = server.ws_url + "?session_id=" + sid
    with connect(url) as owner:
        reset = ask(owner, {"type": "reset", "data": {"seed": 4}})
        assert reset["type"] == "observation"
        with connect(url) as second:
            err = json.loads(second.recv(timeout=60))
        assert "belongs to another connection" in err["data"]["message"]
        assert (
            "held by a connection"
            in rpc(server.url, "openenv/session/close", session_id=sid)["error"]["message"]
        )
        step = ask(owner, {"type": "step", "data": {"action": "not a tool call"}})
        assert step["data"]["observation"]["info"]["budget"]["used"] == 1
        status = sessions(server.url)
        assert status["http"]["active"] == 1 and status["envs"] == 2
    # it ended with the socket that held it
    wait_until(lambda: sessions(server.url)["http"]["active"] == 0, "the attached session to end")
    with connect(url) as late:
        err = json.loads(late.recv(timeout=60))
    assert "Unknown session_id" in err["data"]["message"]
    wait_until(lambda: sessions(server.url)["envs"] == 1, "the attached session's env to close")


def test_http_reset_runs_in_a_counted_session_and_http_step_is_refused(server, bystander):
    memory = Memory(server, "HTTP /reset flood (8 clients x 6 resets), /step")
    envs0 = sessions(server.url)["envs"]
    # the HTTP pool full (unattached /mcp sessions count in it): a reset is refused clearly
    made = [rpc(server.url, "openenv/session/create", k) for k in range(HTTP_CAP)]
    full = requests.post(server.url + "/reset", json={"seed": 1}, timeout=60)
    assert full.status_code == 503 and full.json()["code"] == "CAPACITY_REACHED"
    for k, answer in enumerate(made):
        rpc(server.url, "openenv/session/close", k, session_id=answer["result"]["session_id"])
    local = make(ENV_ID, budget=BUDGET)
    want = {seed: local.reset(seed=seed)[0] for seed in range(6)}
    seen = []

    def flood(worker: int) -> list[tuple[int, int, dict]]:
        with requests.Session() as http:
            out = []
            for seed in range(6):
                r = http.post(server.url + "/reset", json={"seed": seed}, timeout=300)
                out.append((seed, r.status_code, r.json()))
            return out

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(flood, w) for w in range(8)]
        while not all(f.done() for f in futures):
            status = sessions(server.url)
            seen.append(status["http"]["active"])
            bystander.check(1)
        results = [row for f in futures for row in f.result()]
    assert len(results) == 48 and max(seen) <= HTTP_CAP
    for seed, code, body in results:
        assert code in (200, 503), body
        if code == 200:
            assert body["observation"]["text"] == want[seed]
        else:
            assert body["code"] == "CAPACITY_REACHED"
    assert sum(code == 200 for _, code, _ in results) >= 1
    assert sessions(server.url)["http"]["active"] == 0
    wait_until(lambda: sessions(server.url)["envs"] == envs0, "the /reset sessions' envs to close")
    step = requests.post(server.url + "/step", json={"action": {"action": "x"}}, timeout=60)
    assert step.status_code == 409 and "WebSocket session on /ws" in step.json()["detail"]
    bad = requests.post(server.url + "/reset", json={"seed": -1}, timeout=60)
    assert bad.status_code == 422 and bad.json()["code"] == "VALIDATION_ERROR"
    local.close()
    memory.check()


# ------------------------------------------------------------------------- sizes and memory
def _post_chunked(port: int, path: str, total: int, chunk: int = 1 << 20):
    """POST ``total`` bytes to ``path`` in chunks (no Content-Length) until the server answers
    or stops reading; returns (the server's answer, bytes sent)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(60)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    got = bytearray()
    answered = threading.Event()

    def read():
        try:
            while data := sock.recv(65536):
                got.extend(data)
        except OSError:
            pass
        answered.set()

    reader = threading.Thread(target=read, daemon=True)
    sent = 0
    frame = f"{chunk:x}\r\n".encode() + b"7" * chunk + b"\r\n"
    try:
        sock.sendall(head.encode())
        reader.start()
        while sent < total and not answered.is_set():
            sock.sendall(frame)
            sent += chunk
        if sent >= total:
            sock.sendall(b"0\r\n\r\n")
    except OSError:  # the server closed the connection: it read no more
        pass
    answered.wait(120)
    sock.close()
    return bytes(got).decode(errors="replace"), sent


def test_chunked_body_is_capped_on_bytes_read(server, bystander):
    memory = Memory(server, "200 MB chunked POST /reset")
    port = int(server.url.rsplit(":", 1)[1])
    answer, sent = _post_chunked(port, "/reset", 200 << 20)
    assert answer.startswith("HTTP/1.1 413"), answer[:300]
    body = json.loads(answer.split("\r\n\r\n", 1)[1])
    assert "over the limit of 1048576" in body["detail"]
    assert sent < 200 << 20  # the server stopped reading
    print(f"\n[chunked] sent {sent / 2**20:.0f} MiB before the server's 413")
    memory.check()


def test_replay_keys_are_digests_and_kept_answers_bounded(server, bystander):
    memory = Memory(server, "400 one-MB actions with request ids")
    with connect(server.ws_url, max_size=None) as ws:
        assert ask(ws, {"type": "reset", "data": {"seed": 5}})["type"] == "observation"
        for k in range(400):
            action = f"{k:07d}" + "x" * (1_000_000 - 7)
            answer = ask(ws, {"type": "step", "data": {"action": action, "request_id": f"b{k}"}})
            obs = answer["data"]["observation"]
            assert "over the limit" in obs["text"] and obs["info"]["invalid_action"]
            if k % 100 == 0:
                bystander.check(1)
        again = ask(ws, {"type": "step", "data": {"action": action, "request_id": "b399"}})
        assert again["data"]["observation"]["replayed"]
        assert again["data"]["observation"]["info"]["budget"]["used"] == 400
        refused = ask(ws, {"type": "step", "data": {"action": "other", "request_id": "b399"}})
        assert refused["data"]["code"] == "EXECUTION_ERROR"
        assert "already used" in refused["data"]["message"]
        assert len(refused["data"]["message"]) < 300  # quotes no action text
    memory.check()


def test_memory_per_session_is_bounded(server, bystander):
    """8 sessions each fill their replay cache (1,100 steps with request ids): the server
    grows by less than 8 MiB a session (env included; docs/service.md gives the figures)."""
    memory = Memory(server, "8 sessions x 1,100 steps with request ids")

    async def run():
        from websockets.asyncio.client import connect as aconnect

        socks = [await aconnect(server.ws_url, max_size=None) for _ in range(8)]
        try:

            async def play(k, ws):
                await ws.send(json.dumps({"type": "reset", "data": {"seed": k}}))
                json.loads(await ws.recv())
                for n in range(1100):
                    data = {"action": f"look {n}", "request_id": f"{k}-{n}"}
                    await ws.send(json.dumps({"type": "step", "data": data}))
                    answer = json.loads(await ws.recv())
                return answer["data"]["observation"]["info"]["budget"]["used"]

            used = await asyncio.gather(*(play(k, ws) for k, ws in enumerate(socks)))
            rss = server.rss_kb()
            return used, rss
        finally:
            for ws in socks:
                await ws.close()

    used, rss = asyncio.run(run())
    assert used == [1100] * 8
    per_session = (rss - memory.rss0) / 8
    print(f"\n[memory] per session with a full replay cache: {per_session / 1024:.2f} MiB")
    assert per_session < 8 * 1024
    memory.check()


# ------------------------------------------------------------------------- malformed messages
MALFORMED = [
    ("[]", "VALIDATION_ERROR", "JSON array"),
    ("1", "VALIDATION_ERROR", "JSON number"),
    ('"reset"', "VALIDATION_ERROR", "JSON string"),
    ("null", "VALIDATION_ERROR", "JSON null"),
    ('{"type": "reset", "data": {"seed": ' + "9" * 5001 + "}}", "INVALID_JSON", "digits"),
    ("[" * 100_000, "INVALID_JSON", "nested too deep"),
    ('{"type": "step", "data": ' + "[" * 5000 + "]" * 5000 + "}", "INVALID_JSON", "too deep"),
    (b"\xff\xfe not utf-8", "INVALID_JSON", "not UTF-8"),
    ("{not json", "INVALID_JSON", "Invalid JSON"),
    ('{"type": "step"}', "VALIDATION_ERROR", "needs"),
    ('{"type": "step", "data": []}', "VALIDATION_ERROR", "must be an object"),
    ('{"type": "step", "data": {"action": 7}}', "VALIDATION_ERROR", "Invalid message"),
    ('{"type": "reset", "data": {"seed": -1}}', "VALIDATION_ERROR", "non-negative"),
    ('{"type": "reset", "data": {"seed": true}}', "VALIDATION_ERROR", "non-negative"),
    ('{"type": "reset", "data": {"self": 1}}', "VALIDATION_ERROR", "unknown field"),
    ('{"type": "reset", "data": {"options": 3}}', "VALIDATION_ERROR", "options"),
    ('{"type": "state", "extra": 1}', "VALIDATION_ERROR", "unknown field"),
    ('{"type": 5}', "UNKNOWN_TYPE", "Unknown message type"),
    ('{"type": "mcp", "data": {"jsonrpc": "2.0"}}', None, None),  # a JSON-RPC error inside
]


def test_malformed_messages_get_an_error_and_leave_the_session_as_it_was(server, bystander):
    memory = Memory(server, f"{len(MALFORMED)} malformed messages")
    local = make(ENV_ID, budget=BUDGET)
    _, info = local.reset(seed=9)
    moves = [policy_action(local, info, np.random.default_rng(9)) for _ in range(2)]
    local.reset(seed=9)
    want = [_json(local.step(m)[4]) for m in moves]
    with connect(server.ws_url) as ws:
        assert ask(ws, {"type": "reset", "data": {"seed": 9}})["type"] == "observation"
        first = ask(ws, {"type": "step", "data": {"action": moves[0]}})["data"]["observation"]
        assert first["info"] == want[0]
        for text, code, words in MALFORMED:
            answer = ask(ws, text)
            if code is None:
                assert answer["type"] == "mcp" and answer["data"]["error"]["code"] == -32600
                continue
            assert answer["type"] == "error", text[:60]
            assert answer["data"]["code"] == code, (text[:60], answer)
            assert words in answer["data"]["message"], (text[:60], answer)
            assert len(json.dumps(answer)) < 4000  # no input echoed back
        state = ask(ws, {"type": "state"})["data"]
        assert state["step_count"] == 1
        second = ask(ws, {"type": "step", "data": {"action": moves[1]}})["data"]["observation"]
        assert second["info"] == want[1]  # nothing of the malformed messages ran
    bystander.check()
    local.close()
    memory.check()


# ------------------------------------------------------------------------- lost answers
def test_a_retried_step_after_a_lost_answer_gets_its_own_turn(server, bystander):
    local = make(ENV_ID, budget=BUDGET)
    _, info = local.reset(seed=7)
    rng = np.random.default_rng(7)
    moves = []
    for _ in range(4):
        moves.append(policy_action(local, info, rng))
        info = local.step(moves[-1])[4]
    local.reset(seed=7)
    want = [_json(local.step(m)[4]) for m in moves]

    with connect(server.ws_url) as ws:  # a client of the wire protocol, deltas asked for
        reset = ask(ws, {"type": "reset", "data": {"seed": 7, "info_delta": True}})
        held = reset["data"]["observation"]
        info = held["info"]
        step = {"action": moves[0], "request_id": "s0", "info_base": held["info_seq"]}
        lost = ask(ws, {"type": "step", "data": step})  # its answer is lost: nothing applied
        assert lost["data"]["observation"]["info_delta"]
        # the retry names the answer the client holds (the reset's): the whole info comes back
        again = ask(ws, {"type": "step", "data": step})["data"]["observation"]
        assert again["replayed"] and not again["info_delta"] and again["info"] == want[0]
        info, base = again["info"], again["info_seq"]
        for k in (1, 2):
            data = {"action": moves[k], "request_id": f"s{k}", "info_base": base}
            obs = ask(ws, {"type": "step", "data": data})["data"]["observation"]
            assert obs["info_delta"] and obs["info_base"] == base
            info = {**info, **obs["info"]}
            assert info == want[k] and list(info) == list(want[k])
            base = obs["info_seq"]
        # a step naming an answer older than the last one sent gets the whole info too
        data = {"action": moves[3], "request_id": "s3", "info_base": base - 1}
        obs = ask(ws, {"type": "step", "data": data})["data"]["observation"]
        assert not obs["info_delta"] and obs["info"] == want[3]

    async def with_the_client():
        async with BudgetEnvClient(base_url=server.url, message_timeout_s=300) as client:
            await client.reset(seed=7)
            first = (await client.step(BudgetAction(action=moves[0], request_id="a0"))).observation
            # the answer of a1 is lost: sent and answered, never parsed by the client
            lost = BudgetAction(action=moves[1], request_id="a1")
            await client._send({"type": "step", "data": client._step_payload(lost)})
            await client._receive()
            again = (await client.step(lost)).observation
            later = [
                (await client.step(BudgetAction(action=m, request_id=f"a{k}"))).observation
                for k, m in ((2, moves[2]), (3, moves[3]))
            ]
            return first, again, later

    first, again, later = asyncio.run(with_the_client())
    assert first.info == want[0] and again.replayed and again.info == want[1]
    assert [o.info for o in later] == want[2:]
    assert [list(o.info) for o in later] == [list(w) for w in want[2:]]
    local.close()


def test_a_caller_editing_its_info_changes_no_later_answer(server, bystander):
    local = make(ENV_ID, budget=BUDGET)
    remote = RemoteEnv(server.url)
    rng = np.random.default_rng(8)
    _, info = local.reset(seed=8)
    _, got = remote.reset(seed=8)
    for turn in range(6):
        # what a careless caller (or a wrapper) may do to the info it got
        got["budget"]["used"] = -1
        got["tools"].clear()
        got["candidate_actions"].append("not from the server")
        got["goal"] = "edited"
        action = policy_action(local, info, rng)
        *_, info = local.step(action)
        *_, got = remote.step(action)
        assert got == _json(info), turn
    remote.close()
    local.close()


# ------------------------------------------------------------------------- lifetime
def test_any_message_keeps_a_session_alive_and_silence_ends_it(quick):
    by = Bystander(quick.url)
    reaped0 = sessions(quick.url)["reaped"]
    with connect(quick.ws_url) as ws:
        assert ask(ws, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        end = time.monotonic() + 3 * QUICK_IDLE_S
        while time.monotonic() < end:  # only state queries, for 3 idle timeouts
            assert ask(ws, {"type": "state"})["type"] == "state"
            by.check(1)
            time.sleep(QUICK_IDLE_S / 4)
        step = ask(ws, {"type": "step", "data": {"action": "not a tool call"}})
        assert step["data"]["observation"]["info"]["budget"]["used"] == 1
    assert sessions(quick.url)["reaped"] == reaped0
    with connect(quick.ws_url) as silent:
        assert ask(silent, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"

        def reaped():
            by.check(1)
            return sessions(quick.url)["reaped"] == reaped0 + 1

        wait_until(reaped, "the silent one reaped", every_s=0.2)
        err = json.loads(silent.recv(timeout=60))
    assert err["data"]["code"] == "SESSION_ERROR" and "without a message" in err["data"]["message"]
    by.check()
    by.close()


VANISHING = textwrap.dedent(
    """
    import asyncio, json, sys
    from websockets.asyncio.client import connect

    async def main(url, n):
        socks = []
        for k in range(n):
            ws = await connect(url)
            await ws.send(json.dumps({"type": "reset", "data": {"seed": k}}))
            await ws.recv()
            socks.append(ws)
        for ws in socks[::2]:  # half die with a step in flight, its answer never read
            await ws.send(json.dumps({"type": "step", "data": {"action": "x" * 4000}}))
        print("ready", flush=True)
        await asyncio.sleep(600)

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    """
)


def test_vanished_clients_end_quietly(server, bystander):
    memory = Memory(server, "90 clients killed")
    before = sessions(server.url)
    log0 = server.log()
    proc = subprocess.Popen(
        [sys.executable, "-c", VANISHING, server.ws_url, "90"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert sessions(server.url)["active"] == before["active"] + 90
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # every session ends and frees its env (closed on the lane's worker, after the release)
    wait_until(
        lambda: (
            (s := sessions(server.url))["active"] == before["active"]
            and s["envs"] == before["envs"]
        ),
        "the 90 sessions and their envs to end",
    )
    bystander.check()
    new = server.log()[len(log0) :]
    assert "Traceback" not in new and len(new.splitlines()) <= 1, new[-3000:]
    memory.check()


def test_binding_beyond_loopback_warns(caplog, server):
    from budget_envs.service.server import bind_warning, warn_if_exposed

    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2", "[::1]"):
        assert bind_warning(host) is None, host
    for host in ("0.0.0.0", "::", "192.168.1.20", "my-host.example"):
        assert "no authentication" in bind_warning(host), host
    with caplog.at_level(logging.WARNING, logger="budget_envs.service.server"):
        assert warn_if_exposed("0.0.0.0") and not warn_if_exposed("127.0.0.1")
    assert [r.getMessage() for r in caplog.records] == [bind_warning("0.0.0.0")]
    assert "no authentication" not in server.log()  # served on loopback: no warning
    # the command logs it before it binds: 192.0.2.1 (TEST-NET-1) is no address of this
    # machine, so the bind then fails and nothing listens beyond loopback
    exe = Path(sys.executable).with_name("budgetmix")
    run = subprocess.run(
        [str(exe), "serve", ENV_ID, "--host", "192.0.2.1", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0
    assert bind_warning("192.0.2.1") in run.stderr, run.stderr[-2000:]
