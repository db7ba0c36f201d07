"""Hostile callers and broken records lose nothing: closed envs, foreign snapshots, bounded
ToolUse caches, and a web shop whose sessions and threads other clients cannot take away."""

from __future__ import annotations

import socket
import threading

import requests
from budget_envs.registry import registered_ids
from contract_helpers import TOY_ID, make

from budget_envs.envs.tooluse import ToolUseEnv
from budget_envs.envs.tooluse.lru import BLOCK_CACHE_SIZE, MEMO_SIZE
from budget_envs.envs.webshop import WebShopEnv
from budget_envs.envs.webshop.app import WebShopApp
from budget_envs.envs.webshop.server import ShopServer
from budget_envs.envs.webshop.shop import get_shop

IDS = registered_ids()
OTHER_IDS = [i for i in IDS if i != TOY_ID]


def _played(env_id, **kwargs):
    """``env_id`` reset on its first task with one playable action taken."""
    env = make(env_id, **kwargs)
    obs, info = env.reset(seed=0, options={"task_id": 0})
    assert info["candidate_actions"], env_id
    env.step(info["candidate_actions"][0])
    return env


def _where(inner):
    """Everything a restore could change, as the caller sees it."""
    return (
        inner.task_id,
        inner.turn,
        inner.trace,
        inner.done,
        inner.snapshot().observation,
        inner.current_info()["state_hash"],
        inner.cost_to_go(),
    )


# ---------------------------------------------------------------------- ToolUse caches
def _rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line in /proc/self/status")


def test_tooluse_caches_stay_within_their_bounds_over_many_fresh_tasks(record_property):
    env = ToolUseEnv()
    world = env.world
    assert (world.memo.maxsize, env._blocks.maxsize) == (MEMO_SIZE, BLOCK_CACHE_SIZE)
    ids = env.task_ids
    rss = [_rss_mb()]
    peak_memo = peak_blocks = 0
    # 2,400 fresh tasks over every level (distinct ids); one in eight played to its end
    # by the oracle, which is what fills the candidate-call blocks.
    for n in range(2400):
        obs, info = env.reset(options={"task_id": (n * 7919) % len(ids)})
        if n % 8 == 0:
            while not env.done:
                env.step(env.oracle_actions()[0])
        peak_memo = max(peak_memo, len(world.memo))
        peak_blocks = max(peak_blocks, len(env._blocks))
        if n % 600 == 599:
            rss.append(_rss_mb())
    record_property("rss_mb", [round(r, 1) for r in rss])
    record_property("cache_sizes", {"memo": peak_memo, "blocks": peak_blocks})
    # The bounds were reached (entries were dropped to keep them) and never passed.
    assert peak_memo == MEMO_SIZE and world.memo.evictions > 0
    assert peak_blocks == BLOCK_CACHE_SIZE and env._blocks.evictions > 0
    env.close()


# ---------------------------------------------------------------------- web shop sessions
def _oracle_transcript(env, task_id, between=None):
    obs, info = env.reset(options={"task_id": task_id})
    lines = [obs]
    while not env.done:
        if between is not None:
            between()
        obs, reward, terminated, truncated, info = env.step(env.oracle_actions()[0])
        lines += [obs, reward, info["invalid_action"]]
    return lines


def test_a_session_flood_from_another_client_does_not_stop_a_live_env():
    cap = 20
    server = ShopServer(WebShopApp(get_shop(0), max_sessions=cap), workers=4)
    flood = requests.Session()
    url = server.base_url

    def flood_sessions():
        for _ in range(cap + 5):
            r = flood.post(f"{url}/api/sessions", json={"task_id": "L1-0000"}, timeout=10)
            assert r.status_code == 201

    try:
        calm = WebShopEnv(base_url=url, level=3)
        expected = _oracle_transcript(calm, "L3-0002")
        calm.close()
        env = WebShopEnv(base_url=url, level=3)
        env.reset(options={"task_id": "L3-0002"})
        first_sid = env._sid
        flood_sessions()
        gone = requests.get(f"{url}/api/sessions/{first_sid}", timeout=10)
        assert gone.status_code == 404  # the flood pushed the env's session out
        # Flooded before every turn, the env plays the same episode to the same win.
        assert _oracle_transcript(env, "L3-0002", between=flood_sessions) == expected
        assert env.won
        # Snapshots, restores and permanent faults go through the same reopening.
        env.reset(options={"task_id": "L3-0002"})
        env.step(env.oracle_actions()[0])
        snap = env.snapshot()
        cost = env.cost_to_go()
        flood_sessions()
        assert env.restore(snap) == snap.observation and env.cost_to_go() == cost
        flood_sessions()
        snap_again = env.snapshot()
        assert snap_again.payload["state"] == snap.payload["state"]
        env.close()
    finally:
        server.stop()


# ---------------------------------------------------------------------- web shop threads
def _slow_connection(server):
    """A connection that starts a request and never finishes it (a slowloris client)."""
    sock = socket.create_connection((server.host, server.port), timeout=10)
    sock.sendall(b"POST /api/sessions HTTP/1.1\r\nHost: shop\r\nContent-Length: 40\r\n\r\n{")
    return sock


def test_slow_connections_hold_no_threads_and_the_env_keeps_stepping():
    baseline = threading.active_count()
    server = ShopServer.start(seed=0, workers=8)
    slow = []
    try:
        env = WebShopEnv(base_url=server.base_url, level=2)
        env.reset(options={"task_id": 0})
        serving = threading.active_count()
        assert serving - baseline == server.threads == 9
        peak = serving
        for _ in range(300):
            slow.append(_slow_connection(server))
            peak = max(peak, threading.active_count())
        while not env.done:  # every turn answered while 300 requests hang half-sent
            obs, reward, terminated, truncated, info = env.step(env.oracle_actions()[0])
            peak = max(peak, threading.active_count())
            assert not info["invalid_action"]
        assert env.won
        assert server.connections >= 301  # the slow ones are open, and cost no thread
        assert peak == serving
        env.close()
    finally:
        for sock in slow:
            sock.close()
        server.stop()


def test_connections_over_the_cap_wait_for_a_free_slot():
    cap = 6
    server = ShopServer.start(seed=0, workers=2, max_connections=cap)
    held = []
    try:
        request = b"GET /api/info HTTP/1.1\r\nHost: shop\r\n\r\n"
        for _ in range(cap):  # each answered once, then idle on keep-alive: every slot taken
            sock = socket.create_connection((server.host, server.port), timeout=10)
            sock.sendall(request)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            held.append(sock)
        late = socket.create_connection((server.host, server.port), timeout=10)
        late.sendall(request)  # queued in the listen backlog, not accepted
        assert server.connections == cap
        held.pop().close()  # a slot frees: the late connection is accepted and answered
        assert late.recv(65536).startswith(b"HTTP/1.1 200")
        assert server.connections == cap
        held.append(late)
    finally:
        for sock in held:
            sock.close()
        server.stop()
