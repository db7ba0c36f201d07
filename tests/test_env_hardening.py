"""Hostile callers and broken records lose nothing: closed envs, foreign snapshots, bounded
ToolUse caches, and a web shop whose sessions and threads other clients cannot take away."""

from __future__ import annotations

import pickle
import socket
import threading

import gymnasium as gym
import pytest
import requests
from budget_envs.registry import registered_ids
from contract_helpers import TOY_ID, make
from toy_env import ToyEnv

from budget_envs.core import Snapshot
from budget_envs.envs.tooluse import ToolUseEnv
from budget_envs.envs.tooluse.lru import BLOCK_CACHE_SIZE, MEMO_SIZE
from budget_envs.envs.webshop import WebShopEnv
from budget_envs.envs.webshop.app import WebShopApp
from budget_envs.envs.webshop.server import ShopServer
from budget_envs.envs.webshop.shop import get_shop
from budget_envs.errors import EnvClosed, SnapshotMismatch

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


# ---------------------------------------------------------------------- close
@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_every_call_after_close_raises_closed_environment_error(env_id):
    env = _played(env_id)
    inner = env.unwrapped
    snap = inner.snapshot()
    env.close()
    calls = {
        "step": lambda: env.step("look"),
        "reset": lambda: env.reset(seed=0),
        "oracle_actions": inner.oracle_actions,
        "cost_to_go": inner.cost_to_go,
        "snapshot": inner.snapshot,
        "restore": lambda: inner.restore(snap),
    }
    for name, call in calls.items():
        with pytest.raises(gym.error.ClosedEnvironmentError, match="was closed") as caught:
            call()
        assert isinstance(caught.value, EnvClosed), name
    env.close()  # a second close does nothing


def test_a_closed_web_shop_env_starts_no_server_again():
    env = WebShopEnv(level=1)
    env.reset(seed=0)
    env.close()
    assert env.server is None
    with pytest.raises(EnvClosed):
        env.shared_env_kwargs()  # would start a server for a closed env
    assert env.server is None


# ---------------------------------------------------------------------- restore
@pytest.mark.parametrize("env_id", OTHER_IDS, ids=OTHER_IDS)
def test_a_snapshot_of_another_family_is_refused_both_ways_and_changes_nothing(env_id):
    env = _played(env_id, budget=None)
    toy = _played(TOY_ID, budget=None)
    inner, toy_inner = env.unwrapped, toy.unwrapped
    before, toy_before = _where(inner), _where(toy_inner)
    for target, snap, other in (
        (inner, toy_inner.snapshot(), toy_inner),
        (toy_inner, inner.snapshot(), inner),
    ):
        with pytest.raises(SnapshotMismatch) as caught:
            target.restore(snap)
        message = str(caught.value)
        assert type(target).__name__ in message and type(other).__name__ in message
        assert repr(snap.task_id) in message
    assert _where(inner) == before and _where(toy_inner) == toy_before
    # both still play on from where they were
    assert not env.step(inner.current_info()["candidate_actions"][0])[4]["invalid_action"]
    env.close()
    toy.close()


def test_a_tooluse_snapshot_of_another_world_or_task_set_is_refused():
    env = ToolUseEnv(level=1)
    env.reset(seed=0)
    env.step(env.oracle_actions()[0])
    snap = env.snapshot()
    for other, words in (
        (ToolUseEnv(level=1, world_seed=1), ("world_seed=0", "world_seed=1")),
        (ToolUseEnv(level=2), (repr(snap.task_id), "does not have")),
    ):
        other.reset(seed=3)
        other.step(other.oracle_actions()[0])
        before = _where(other)
        with pytest.raises(SnapshotMismatch) as caught:
            other.restore(snap)
        assert all(w in str(caught.value) for w in words), str(caught.value)
        assert _where(other) == before
        other.close()
    same = ToolUseEnv(level=[1, 2])  # another env with the task and the world: restores
    assert same.restore(snap) == snap.observation and same.task_id == snap.task_id
    assert same.cost_to_go() == env.cost_to_go()
    env.close()
    same.close()


def test_a_web_shop_snapshot_of_another_scoring_or_task_set_is_refused():
    server = ShopServer.start(seed=0, workers=4)
    try:
        env = WebShopEnv(base_url=server.base_url, level=2)
        env.reset(seed=0)
        env.step(env.oracle_actions()[0])
        snap = env.snapshot()
        for other, words in (
            (WebShopEnv(base_url=server.base_url, level=2, scoring="webshop"), ("'webshop'",)),
            (WebShopEnv(base_url=server.base_url, level=1), ("does not have",)),
        ):
            other.reset(seed=1)
            before = _where(other)
            with pytest.raises(SnapshotMismatch) as caught:
                other.restore(snap)
            assert all(w in str(caught.value) for w in words), str(caught.value)
            assert _where(other) == before
            other.close()
        # a fresh env of the same settings that never reset restores it (opening a session)
        fresh = WebShopEnv(base_url=server.base_url, level=[1, 2])
        assert fresh.restore(snap) == snap.observation
        assert fresh.cost_to_go() == env.cost_to_go()
        fresh.close()
        env.close()
    finally:
        server.stop()


def test_snapshots_pickled_before_env_and_scope_existed_still_restore():
    env = ToyEnv()
    env.reset(seed=0)
    env.step("look")
    snap = env.snapshot()
    # What an older Snapshot pickled: its fields without ``env`` and ``scope``.
    old = object.__new__(Snapshot)
    for name in ("task_id", "observation", "trace", "reset_rng", "rng", "done", "turn", "payload"):
        object.__setattr__(old, name, getattr(snap, name))
    blob = pickle.dumps(old)
    assert b"scope" not in blob and b"toy_env" not in blob
    loaded = pickle.loads(blob)
    assert loaded.env is None and loaded.scope == ()
    other = ToyEnv()
    assert other.restore(loaded) == snap.observation
    assert _where(other) == _where(env)
    # an old snapshot of a task the env lacks is still refused
    with pytest.raises(SnapshotMismatch, match="does not have"):
        ToyEnv(n_tasks=1).restore(pickle.loads(blob.replace(b"toy-0", b"toy-9")))


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
    # by the oracle, its offered calls read at every turn (which fills the candidate-call
    # blocks: they are built only when read).
    for n in range(2400):
        obs, info = env.reset(options={"task_id": (n * 7919) % len(ids)})
        if n % 8 == 0:
            while not env.done:
                assert info["candidate_actions"]
                info = env.step(env.oracle_actions()[0])[4]
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
    sock.sendall(b"POST /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 40\r\n\r\n{")
    return sock


def _server_threads(server):
    """Threads of this shop server (its loop and its workers, named by its port): counted by
    name, so threads other tests leave starting or ending in this process do not count."""
    worker, loop = f"webshop-worker-{server.port}-", f"webshop-server-{server.port}"
    return sum(1 for t in threading.enumerate() if t.name.startswith(worker) or t.name == loop)


def test_slow_connections_hold_no_threads_and_the_env_keeps_stepping():
    server = ShopServer.start(seed=0, workers=8)
    slow = []
    try:
        env = WebShopEnv(base_url=server.base_url, level=2)
        env.reset(options={"task_id": 0})
        serving = _server_threads(server)
        assert serving == server.threads == 9
        peak = serving
        for _ in range(300):
            slow.append(_slow_connection(server))
            peak = max(peak, _server_threads(server))
        while not env.done:  # every turn answered while 300 requests hang half-sent
            obs, reward, terminated, truncated, info = env.step(env.oracle_actions()[0])
            peak = max(peak, _server_threads(server))
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
        request = b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
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
