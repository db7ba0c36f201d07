"""ALFWorld's reset cache: a reset to a game loaded before restores its cached initial state, and
what follows is what a cold load (fresh env, nothing cached) gives."""

from __future__ import annotations

import json
import os
import random

import pytest
from budget_envs.wrappers import ErrorInjection

from budget_envs.envs.alfworld import AlfWorldEnv
from budget_envs.envs.alfworld import engine as alfworld_engine
from budget_envs.envs.alfworld.engine import (
    RESET_CACHE_SIZE,
    reset_cache_info,
    set_reset_cache_size,
)

#: Small scenes (at most 12 receptacles) of the train split: 42 tasks over the six types.
SMALL = {"split": "train", "max_receptacles": 12}
CONTINUATION = 8


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("alfworld-reset-cache")


def _play(env, seed, steps):
    """``steps`` turns of actions drawn by ``random.Random(seed)`` from the admissible list:
    each turn's (action, observation, reward, terminated, truncated, state_hash, admissible)."""
    rng = random.Random(seed)
    out = []
    admissible = env.unwrapped.current_info()["admissible_actions"]
    for _ in range(steps):
        if env.unwrapped.done:
            break
        action = rng.choice(admissible)
        obs, reward, term, trunc, info = env.step(action)
        admissible = info["admissible_actions"]
        out.append((action, obs, reward, term, trunc, info["state_hash"], tuple(admissible)))
    return out


def _episode(env, task_id, seed):
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    head = (obs, info["state_hash"], tuple(info["admissible_actions"]), info["gamefile"])
    return head, _play(env, seed, CONTINUATION)


@pytest.mark.slow
def test_cached_resets_over_42_small_tasks_equal_cold_loads(cache):
    """Cycling over every small-scene task with random steps between resets: each reset is a
    cache hit, and its observation, state_hash and seeded continuation equal a fresh env's."""
    env = AlfWorldEnv(cache_dir=cache, **SMALL)
    ids = list(env.task_ids)
    assert len(ids) >= 40 and RESET_CACHE_SIZE >= len(ids)
    between = random.Random(7)
    for task_id in ids:  # first round: every game is loaded (from the file or the cache)
        env.reset(seed=0, options={"task_id": task_id})
        _play(env, between.randrange(10**6), between.randrange(1, 6))
    before = env.reset_cache_stats
    assert reset_cache_info()["size"] >= len(ids)
    order = ids[::-1]
    between.shuffle(order)
    cached = {}
    for i, task_id in enumerate(order):
        cached[task_id] = _episode(env, task_id, seed=100 + i)
        _play(env, between.randrange(10**6), between.randrange(1, 6))  # steps between resets
    after = env.reset_cache_stats
    assert after["hits"] - before["hits"] == len(order)
    assert after["misses"] == before["misses"]
    played = sum(len(steps) for _head, steps in cached.values())
    assert played >= len(order) * 3  # the continuations are real play, not empty lists
    for i, task_id in enumerate(order):
        cold = AlfWorldEnv(cache_dir=cache, reset_cache=False, **SMALL)
        size = reset_cache_info()["size"]
        assert _episode(cold, task_id, seed=100 + i) == cached[task_id], task_id
        assert cold.reset_cache_stats == {"hits": 0, "misses": 1}
        assert reset_cache_info()["size"] == size  # the cold env neither read nor filled it
        cold.close()


def test_faults_and_restores_through_the_cache_equal_cold_loads(cache):
    """ErrorInjection's phantom turns restore a snapshot (a reload, here a cache hit) and
    perturb turns move the world: the transcripts equal a cold env's, fault for fault."""
    kinds = ["phantom", "perturb"]

    def run(env, task):
        faulty = ErrorInjection(env, kinds=kinds, rate=0.5, seed=11)
        obs, info = faulty.reset(seed=3, options={"task_id": task})
        rng = random.Random(task)
        out = [(obs, info["state_hash"])]
        for _ in range(10):
            if env.done:
                break
            action = rng.choice(info["admissible_actions"])
            obs, reward, term, _trunc, info = faulty.step(action)
            fault = info.get("fault", {})
            out.append((action, obs, reward, term, info["state_hash"], fault.get("effect")))
        return out

    warm = AlfWorldEnv(cache_dir=cache, **SMALL)
    tasks = [0, 5, 11, 17]
    for task in tasks:  # load them once, so the runs below are cache hits
        warm.reset(seed=0, options={"task_id": task})
    hits = warm.reset_cache_stats["hits"]
    cached = [run(warm, task) for task in tasks]
    stats = warm.reset_cache_stats
    effects = [step[-1] for episode in cached for step in episode[1:]]
    assert "dropped" in effects and "world" in effects  # both kinds fired
    # every reset and every phantom restore was a hit
    assert stats["hits"] - hits == len(tasks) + effects.count("dropped")
    for task, expected in zip(tasks, cached):
        cold = AlfWorldEnv(cache_dir=cache, reset_cache=False, **SMALL)
        assert run(cold, task) == expected
        assert cold.reset_cache_stats["hits"] == 0


def test_snapshot_restored_after_other_tasks_equals_the_original(cache):
    env = AlfWorldEnv(cache_dir=cache, **SMALL)
    env.reset(seed=0, options={"task_id": 3})
    _play(env, 1, 4)
    snap = env.snapshot()
    expected = _play(env, 2, 5)
    for task in (4, 9, 3):  # other games (and the same one) in between
        env.reset(seed=0, options={"task_id": task})
        _play(env, task, 3)
    hits = env.reset_cache_stats["hits"]
    env.restore(snap)
    assert env.reset_cache_stats["hits"] == hits + 1
    assert _play(env, 2, 5) == expected


def test_the_cache_is_bounded_and_keyed_by_the_file(cache, tmp_path):
    env = AlfWorldEnv(cache_dir=cache, **SMALL)
    old = set_reset_cache_size(2)
    try:
        assert old == RESET_CACHE_SIZE
        assert reset_cache_info()["size"] <= 2
        evictions = reset_cache_info()["evictions"]
        for task in (0, 1, 2, 0):
            env.reset(seed=0, options={"task_id": task})
        info = reset_cache_info()
        assert info["size"] == 2 and info["maxsize"] == 2
        assert info["evictions"] - evictions >= 2  # 2 evicts 0, then 0 evicts 1
        assert env.reset_cache_stats["misses"] >= 2
    finally:
        set_reset_cache_size(old)
    with pytest.raises(ValueError, match="maxsize"):
        set_reset_cache_size(0)
    with pytest.raises(TypeError, match="reset_cache"):
        AlfWorldEnv(cache_dir=cache, reset_cache="yes")

    # An edited game file is a new entry: the reset plays the new text, not the cached one.
    src = env.game_file(env.task_ids[0])
    game = tmp_path / "game.tw-pddl"
    data = json.loads(open(src).read())
    game.write_text(json.dumps(data))
    engine = alfworld_engine.AlfredEngine()
    first = engine.load(str(game))
    assert engine.load(str(game)) == first and engine.cache_stats == {"hits": 1, "misses": 1}
    data["grammar"] = data["grammar"].replace("You are in the middle of a room.", "You stand.")
    assert data["grammar"] != json.loads(open(src).read())["grammar"]
    game.write_text(json.dumps(data))
    st = os.stat(game)
    os.utime(game, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a later modification time
    edited = engine.load(str(game))
    assert engine.cache_stats == {"hits": 1, "misses": 2}
    assert edited.startswith("-= Welcome to TextWorld, ALFRED! =-\n\nYou stand.")
    assert edited == first.replace("You are in the middle of a room.", "You stand.")
