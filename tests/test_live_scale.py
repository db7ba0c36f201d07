"""Many live envs in one process: per-env cost that does not grow with a family's heavy parts.

WebShop envs of a process play on one shop server per catalogue and share their connections
(threads and file descriptors flat in the env count); ToolUse builds its offered calls only
when ``info["candidate_actions"]`` is read, with the same value it would have had eagerly.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import threading
import time

import gymnasium as gym
import pytest

import budget_envs  # noqa: F401
from budget_envs.envs.tooluse import ToolUseEnv
from budget_envs.envs.webshop import server as shop_server
from budget_envs.info import Deferred, LazyInfo


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _shop_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("webshop-"))


# ---------------------------------------------------------------------- WebShop: one server
def _live_shops(n: int) -> tuple[list, int, int]:
    """``n`` WebShop envs made with gym.make (no base_url), each reset and stepped once;
    the shop threads and file descriptors of the process while they are all live."""
    envs = [gym.make("BudgetMix/WebShop-v0", level=2) for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(options={"task_id": i})
        info = env.step(env.unwrapped.oracle_actions()[0])[4]
        assert not info["invalid_action"]
    return envs, _shop_threads(), _fds()


def test_web_shop_envs_of_a_process_share_one_server_and_threads_and_fds_stay_flat():
    base_threads, base_fds = _shop_threads(), _fds()
    few, few_threads, few_fds = _live_shops(4)
    many, many_threads, many_fds = _live_shops(60)
    servers = {e.unwrapped.server for e in few + many}
    assert len(servers) == 1 and None not in servers
    (server,) = servers
    assert server.users == 64
    # one server's threads whatever the count, and fds that do not grow with it (a loop that
    # steps its envs in turn holds one connection, not one per env)
    assert few_threads - base_threads == many_threads - base_threads == server.threads
    assert many_fds - few_fds <= 4, (base_fds, few_fds, many_fds)
    # every env has its own session: their states differ by task
    goals = {e.unwrapped.current_info()["goal"] for e in few + many}
    assert len(goals) > 32
    for env in many:
        env.close()
    assert server.alive and server.users == 4  # the other envs still play on it
    few[0].step(few[0].unwrapped.oracle_actions()[0])
    for env in few:
        env.close()
    assert not server.alive and server.users == 0
    assert _shop_threads() == base_threads
    assert _fds() <= base_fds + 1


def test_web_shop_make_close_cycles_leave_no_threads_or_fds():
    base_threads, base_fds = _shop_threads(), _fds()
    for i in range(40):
        env = gym.make("BudgetMix/WebShop-v0", level=1)
        env.reset(options={"task_id": i})
        env.step(env.unwrapped.oracle_actions()[0])
        env.close()
    assert _shop_threads() == base_threads
    assert _fds() <= base_fds + 1


def test_a_restart_moves_every_env_of_the_process_to_the_new_server_with_episodes_intact():
    envs = [gym.make("BudgetMix/WebShop-v0", level=2) for _ in range(3)]
    try:
        for i, env in enumerate(envs):
            env.reset(options={"task_id": i})
            env.step(env.unwrapped.oracle_actions()[0])
        old = envs[0].unwrapped.server
        hashes = [e.unwrapped.current_info()["state_hash"] for e in envs]
        old.stop()  # the process's shop dies under all three
        for env, before in zip(envs, hashes, strict=True):
            assert env.unwrapped.current_info()["state_hash"] == before
            info = env.step(env.unwrapped.oracle_actions()[0])[4]
            assert not info["invalid_action"]
        new = {e.unwrapped.server for e in envs}
        assert len(new) == 1 and old not in new and new.pop().alive
    finally:
        for env in envs:
            env.close()


def test_different_catalogues_get_different_servers_and_a_base_url_uses_none():
    a = gym.make("BudgetMix/WebShop-v0", level=1)
    b = gym.make("BudgetMix/WebShop-v0", level=1, split="test")
    try:
        a.reset(options={"task_id": 0})
        b.reset(options={"task_id": 0})
        assert a.unwrapped.server is not b.unwrapped.server
        c = gym.make("BudgetMix/WebShop-v0", level=1, base_url=a.unwrapped.base_url)
        c.reset(options={"task_id": 1})
        assert c.unwrapped.server is None and a.unwrapped.server.users == 1
        c.close()
    finally:
        a.close()
        b.close()


def test_a_forked_process_gets_its_own_server():
    if not hasattr(os, "fork"):
        pytest.fail("this test needs os.fork (Linux)")
    env = gym.make("BudgetMix/WebShop-v0", level=1)
    env.reset(options={"task_id": 0})
    parent = env.unwrapped.server
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a new env must not use the parent's server object
        code = 1
        try:
            child = gym.make("BudgetMix/WebShop-v0", level=1)
            child.reset(options={"task_id": 1})
            child.step(child.unwrapped.oracle_actions()[0])
            mine = child.unwrapped.server
            code = 0 if mine is not parent and mine.alive and not parent.alive else 3
            child.close()
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    result = os.read(read, 1)
    os.waitpid(pid, 0)
    os.close(read)
    try:
        assert result == b"\x00"
        assert parent.alive  # the child's exit did not stop the parent's server
        env.step(env.unwrapped.oracle_actions()[0])
    finally:
        env.close()


def test_acquire_and_release_count_users():
    a = shop_server.acquire_server(seed=7, num_products=1000)
    b = shop_server.acquire_server(seed=7, num_products=1000)
    try:
        assert a is b and a.users == 2
        c = shop_server.acquire_server(seed=7, num_products=1000, replace=a)
        assert c is not a and c.users == 1 and a.alive  # a restart leaves others on the old one
        shop_server.release_server(c)
        assert not c.alive
    finally:
        shop_server.release_server(a)
        shop_server.release_server(b)
    assert not a.alive


# ---------------------------------------------------------------------- ToolUse: built when read
def _oracle_states(split: str = "test", tasks: int = 12):
    """(task id, actions) of oracle episodes on fresh tasks."""
    env = ToolUseEnv(split=split)
    out = []
    for tid in env.task_ids[:: len(env.task_ids) // tasks][:tasks]:
        env.reset(options={"task_id": tid})
        plan = []
        while not env.done:
            plan.append(env.oracle_actions()[0])
            env.step(plan[-1])
        out.append((tid, plan))
    env.close()
    return out


def test_tooluse_candidate_calls_are_built_only_when_read():
    plans = _oracle_states()
    env = ToolUseEnv(split="test")
    built = []
    real = env._build_candidates
    env._build_candidates = lambda *a: built.append(1) or real(*a)
    infos = []
    for tid, plan in plans:
        infos.append(env.reset(options={"task_id": tid})[1])
        for action in plan:
            infos.append(env.step(action)[4])
    assert built == [] and len(env._blocks) == 0  # nothing read: nothing built
    assert any(type(i) is LazyInfo for i in infos)
    assert all("candidate_actions" in i for i in infos)
    assert infos[-1]["candidate_actions"] == []  # over: empty, eagerly
    env.close()


def test_tooluse_candidate_calls_read_late_equal_the_calls_read_at_once():
    """Every info read after the episode moved on (and through every way of reading a dict)
    holds what an eager build gave at its own state."""
    plans = _oracle_states()
    lazy, eager = ToolUseEnv(split="test"), ToolUseEnv(split="test")
    for tid, plan in plans:
        infos = [lazy.reset(options={"task_id": tid})[1]]
        first = eager.reset(options={"task_id": tid})[1]
        wanted, keys = [first["candidate_actions"]], [list(first)]
        for action in plan:
            infos.append(lazy.step(action)[4])
            info = eager.step(action)[4]
            wanted.append(info["candidate_actions"])
            keys.append(list(info))
        assert len({tuple(w) for w in wanted}) > 2  # the offers change along the episode
        readers = [
            lambda i: i["candidate_actions"],
            lambda i: dict(i)["candidate_actions"],
            lambda i: {**i}["candidate_actions"],
            lambda i: json.loads(json.dumps(i))["candidate_actions"],
            lambda i: pickle.loads(pickle.dumps(i))["candidate_actions"],
            lambda i: copy.deepcopy(i)["candidate_actions"],
            lambda i: dict(i.items())["candidate_actions"],
            lambda i: i.get("candidate_actions"),
        ]
        for n, (info, want, order) in enumerate(zip(infos, wanted, keys, strict=True)):
            assert readers[n % len(readers)](info) == want, (tid, n)
            assert list(info) == order
    lazy.close()
    eager.close()


def test_lazy_info_keeps_order_equality_and_types():
    made = []
    info = LazyInfo({"a": 1, "calls": Deferred(lambda: made.append(1) or ["x"]), "z": "h"})
    assert "calls" in info and len(info) == 3 and made == []
    info["budget"] = {"limit": 3}  # wrappers add keys without building
    assert made == []
    assert info == {"a": 1, "calls": ["x"], "z": "h", "budget": {"limit": 3}}
    assert {"a": 1, "calls": ["x"], "z": "h", "budget": {"limit": 3}} == info
    assert list(info) == ["a", "calls", "z", "budget"] and made == [1]
    assert isinstance(info, dict) and type(copy.copy(info)) is dict
    assert type(pickle.loads(pickle.dumps(info))) is dict
    info["calls"]
    assert made == [1]  # built once


def test_tooluse_vector_envs_batch_the_offered_calls():
    envs = gym.make_vec("BudgetMix/ToolUse-v0", num_envs=3, vectorization_mode="sync")
    _, infos = envs.reset(seed=0)
    calls = infos["candidate_actions"]
    assert len(calls) == 3 and all(isinstance(c, list) and c for c in calls)
    _, _, _, _, infos = envs.step([c[0] for c in calls])
    assert all(isinstance(c, list) for c in infos["candidate_actions"])
    envs.close()


# ---------------------------------------------------------------------- at the trainers' doors
@pytest.mark.parametrize(
    "env_id,kwargs",
    [("BudgetMix/ToolUse-v0", {}), ("BudgetMix/WebShop-v0", {"level": 2})],
    ids=["tooluse", "webshop"],
)
def test_the_manager_resets_and_steps_1024_envs(env_id, kwargs):
    """verl-agent's shape at NeMo Gym's size: 128 tasks x 8 samples, every env reset and stepped,
    half of them with an action their env offers and half with junk."""
    from budget_envs.integrations.manager import BudgetMixEnvManager

    base_threads, base_fds = threading.active_count(), _fds()
    m = BudgetMixEnvManager(env_id, 1024, group_n=8, budget=4, seed=0, **kwargs)
    try:
        obs, infos = m.reset()
        assert len(obs["text"]) == len(infos) == 1024
        assert len({i["task_id"] for i in infos}) > 64  # 128 groups, tasks drawn per group
        replies = [
            info["candidate_actions"][0] if k % 2 == 0 else "\x00{not json"
            for k, info in enumerate(infos)
        ]
        obs, rewards, dones, infos = m.step(replies)
        valid = [i["is_action_valid"] for i in infos]
        assert all(valid[0::2]) and not any(valid[1::2])
        assert rewards.shape == dones.shape == (1024,)
        # one shop server's threads at most, and descriptors that do not grow with the envs
        assert threading.active_count() - base_threads <= 40
        assert _fds() - base_fds <= 8
    finally:
        m.close()
    assert _fds() <= base_fds + 1


SESSIONS_WORKER = """
import asyncio, json, sys
sys.path.insert(0, {tests!r})
import numpy as np
from contract_helpers import make, policy_action
from budget_envs.service import BudgetAction, BudgetEnvClient

env_id, kwargs = {env_id!r}, json.loads({kwargs!r})

def play_locally(seed, turns):
    # the in-process episode first, so the event loop never waits on an env
    local = make(env_id, budget=turns, **kwargs)
    rng = np.random.default_rng(seed)
    obs, info = local.reset(seed=seed)
    out = [(obs, info["state_hash"])]
    for _ in range(turns):
        action = policy_action(local, info, rng)
        obs, reward, term, trunc, info = local.step(action)
        out.append((action, obs, float(reward), term, trunc, info["state_hash"]))
        if term or trunc:
            break
    local.close()
    return out

async def one(url, seed, episode, opened, go):
    async with BudgetEnvClient(
        base_url=url, message_timeout_s=600, connect_timeout_s=600
    ) as client:
        got = await client.reset(seed=seed)
        same = (got.observation.text, got.observation.info["state_hash"]) == episode[0]
        opened.append(1)
        await go.wait()  # every session of this process open at once before any steps
        for turn, (action, *want) in enumerate(episode[1:]):
            got = (await client.step(BudgetAction(action=action, request_id=str(turn)))).observation
            seen = [got.text, got.reward, got.terminated, got.truncated, got.info["state_hash"]]
            same = same and seen == want
    return same

async def main(url, seeds, turns):
    episodes = [play_locally(s, turns) for s in seeds]
    opened, go = [], asyncio.Event()
    tasks = [asyncio.create_task(one(url, s, e, opened, go)) for s, e in zip(seeds, episodes)]
    while len(opened) < len(seeds):
        if any(t.done() for t in tasks):
            break
        await asyncio.sleep(0.05)
    go.set()
    return await asyncio.gather(*tasks)

url, first, count, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(json.dumps(asyncio.run(main(url, range(first, first + count), turns))))
"""


@pytest.mark.soak  # about 5 minutes for the three on 2 cores: `make test-all`
@pytest.mark.parametrize(
    "env_id,kwargs,count",
    [
        ("BudgetMix/ToolUse-v0", {}, 1024),
        ("BudgetMix/WebShop-v0", {"level": 2}, 1024),
        (
            "BudgetMix/ALFWorld-v0",
            {"level": 1, "tasks_per_level": 16, "split": "train", "max_receptacles": 12},
            128,
        ),
    ],
    ids=["tooluse", "webshop", "alfworld"],
)
def test_serve_holds_1024_concurrent_sessions_with_in_process_answers(env_id, kwargs, count):
    """``budgetmix serve --max-sessions 1024``: sessions from 4 client processes, all open at once
    in each, then 3 turns each; every answer equals the same episode played in process, and
    the server's memory per session stays bounded."""
    import subprocess
    import sys

    from service_helpers import TESTS, budgetmix_serve, sessions, wait_until

    procs_n, turns = 4, 3
    per = count // procs_n
    args = ["--max-sessions", "1024", "--budget", str(turns), "--env-kwargs", json.dumps(kwargs)]
    with budgetmix_serve(env_id, *args) as srv:
        rss0 = srv.rss_kb()
        code = SESSIONS_WORKER.format(tests=str(TESTS), env_id=env_id, kwargs=json.dumps(kwargs))
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, srv.url, str(k * per), str(per), str(turns)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for k in range(procs_n)
        ]
        peak = 0
        while any(p.poll() is None for p in procs):  # the server's memory while sessions live
            peak = max(peak, srv.rss_kb())
            time.sleep(0.5)
        results = []
        for p in procs:
            out, err = p.communicate(timeout=1800)
            assert p.returncode == 0, err[-3000:]
            results += json.loads(out.strip().splitlines()[-1])
        assert len(results) == count and all(results)
        wait_until(lambda: sessions(srv.url)["active"] == 0, "sessions to close")
        per_session_mb = (peak - rss0) / 1024 / count
        assert per_session_mb < {"BudgetMix/ALFWorld-v0": 8.0}.get(env_id, 1.0), per_session_mb


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line")


@pytest.mark.slow
def test_2000_alfworld_make_close_cycles_keep_memory_flat():
    """Each engine used to dlopen its own planner library copy, never unloaded (about 2.7 MiB a
    cycle: 2,000 cycles would add over 5 GB). 16 distinct tasks, as a trainer's groups."""
    kwargs = {"level": 1, "tasks_per_level": 16, "split": "train", "max_receptacles": 12}

    def cycle(i: int) -> None:
        env = gym.make("BudgetMix/ALFWorld-v0", **kwargs)
        env.reset(options={"task_id": i % 16})
        env.step(env.unwrapped.oracle_actions()[0])
        env.close()

    for i in range(200):  # every task parsed, caches at their working size
        cycle(i)
    rss0, fds0 = _rss_mb(), _fds()
    for i in range(2000):
        cycle(i)
    grown = _rss_mb() - rss0
    assert grown < 64, f"{grown:.1f} MB over 2,000 make/close cycles"
    assert _fds() <= fds0 + 1


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["BudgetMix/ALFWorld-v0", "BudgetMix/WebShop-v0"])
def test_skyrl_env_per_trajectory_keeps_memory_flat_over_500_trajectories(env_id):
    """SkyRL's generator builds one env per trajectory and closes it at the end: 500 of them
    (init, two turns, close) after 50 to warm the caches."""
    import skyrl_gym

    from budget_envs.integrations import skyrl

    skyrl.register()
    name = skyrl.skyrl_name(env_id)
    config = {"budget": 4}
    if env_id == "BudgetMix/ALFWorld-v0":
        config["env_kwargs"] = {
            "level": 1,
            "tasks_per_level": 16,
            "split": "train",
            "max_receptacles": 12,
        }

    def trajectory(i: int) -> None:
        env = skyrl_gym.make(name, env_config=dict(config), extras={"seed": i % 16})
        env.init([])
        env.step("look")
        env.step("\x00{broken")
        env.close()

    for i in range(50):
        trajectory(i)
    rss0, fds0, threads0 = _rss_mb(), _fds(), threading.active_count()
    for i in range(500):
        trajectory(i)
    grown = _rss_mb() - rss0
    assert grown < 48, f"{grown:.1f} MB over 500 trajectories"
    assert _fds() <= fds0 + 1 and threading.active_count() <= threads0


# ---------------------------------------------------------------------- ALFWorld: planner copies
def test_live_alfworld_envs_load_planner_copies_of_a_trimmed_image(tmp_path):
    """Every live engine needs its own planner library copy; copies are made from an image of
    about a megabyte (the shipped file is mostly debug information) and play the same games."""
    from fast_downward import interface

    from budget_envs.envs.alfworld import planner_lib

    shipped = os.path.getsize(interface.DOWNWARD_LIB_PATH)
    size = planner_lib.trim_shared_object(interface.DOWNWARD_LIB_PATH, str(tmp_path / "lib.so"))
    assert size < shipped / 10 and size == os.path.getsize(tmp_path / "lib.so")
    (tmp_path / "not-elf.so").write_bytes(b"#!/bin/sh\n" * 20)
    with pytest.raises(ValueError, match="ELF"):
        planner_lib.trim_shared_object(str(tmp_path / "not-elf.so"), str(tmp_path / "out.so"))
    kwargs = {"level": 1, "tasks_per_level": 16, "split": "train", "max_receptacles": 12}
    envs = [gym.make("BudgetMix/ALFWorld-v0", **kwargs) for _ in range(6)]
    try:
        for i, env in enumerate(envs):
            env.reset(options={"task_id": i % 3})
        libs = {id(e.unwrapped._engine._lib) for e in envs}
        assert len(libs) == 6  # one copy per live engine
        image = planner_lib._TRIMMED[os.getpid()]
        assert image is not None and os.path.getsize(image) == size
        for env in envs:  # each plays its game to the end
            while not env.unwrapped.done:
                info = env.step(env.unwrapped.oracle_actions()[0])[4]
            assert info["won"]
    finally:
        for env in envs:
            env.close()


def test_a_planner_image_that_does_not_load_falls_back_to_the_shipped_library(monkeypatch):
    from budget_envs.envs.alfworld import planner_lib

    monkeypatch.setitem(planner_lib._TRIMMED, os.getpid(), "/nonexistent/libdownward.so")
    lib = planner_lib.load_planner_lib()  # the image fails to load: the shipped file is used
    assert hasattr(lib, "load_sas") and planner_lib._TRIMMED[os.getpid()] is None


def test_alfworld_envs_reset_on_many_threads_at_once():
    """The service prepares resets on threads: textworld's parsers are not thread-safe, so every
    parse holds one lock, and threads wanting a game being parsed wait for that parse."""
    from budget_envs.envs.alfworld import engine

    engine.clear_caches()
    misses = engine._INITIAL_STATES.misses
    kwargs = {"level": 1, "tasks_per_level": 16, "split": "train", "max_receptacles": 12}
    errors: list[str] = []
    hashes: dict[int, set] = {}

    def work(k: int) -> None:
        try:
            env = gym.make("BudgetMix/ALFWorld-v0", **kwargs)
            info = env.reset(options={"task_id": k % 16})[1]
            hashes.setdefault(k % 16, set()).add(info["state_hash"])
            env.close()
        except Exception as exc:  # noqa: BLE001 - every failure is reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(48)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert engine._INITIAL_STATES.misses - misses == 16  # each game parsed once
    assert len(hashes) == 16 and all(len(h) == 1 for h in hashes.values())
