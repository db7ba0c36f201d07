"""ALFWorld step and reset: BudgetMix/ALFWorld-v0 against alfworld's own path, same games, same run.

alfworld's path is what ``AlfredTWEnv.init_env`` builds: ``textworld.gym`` over the game file with
``AlfredDemangler`` and ``AlfredInfos`` (admissible commands and ``won`` requested). Games: one
generated task each with a small (10-12), medium (~30) and large (45) scene. A step alternates
``go to`` between two receptacles (a state change and a receptacle description every time). A reset
restarts the same game (upstream reloads the game file; ours hits the memoised translation).
Goals: step >= 10x faster, reset >= 5x faster (ratio ours/baseline <= 0.1 and <= 0.2).

The reset cycle is the training case: resets cycling over every small-scene task of the train
split (42 tasks, at most 12 receptacles), 1-5 random admissible steps between resets (untimed),
through the reset cache (``reset_cache=True``, every game loaded once before) against the cold
reload every reset did before the cache (``reset_cache=False``), both in the same run. It prints
both medians and their ratio. Goal: cached median <= 20 ms.
"""

from __future__ import annotations

import random
import statistics
import time

import pytest

from budget_envs.envs.alfworld import AlfWorldEnv
from budget_envs.envs.alfworld.engine import reference_env

SIZES = {"small": 10, "medium": 30, "large": 45}


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    """One task per size: (env, task index, game file, two receptacle names)."""
    cache = tmp_path_factory.mktemp("alfworld-bench")
    env = AlfWorldEnv(split="valid_seen", cache_dir=cache)
    sizes = [env._specs[t].n_receptacles for t in env.task_ids]
    out = {}
    for name, target in SIZES.items():
        index = min(range(len(sizes)), key=lambda i: (abs(sizes[i] - target), i))
        env.reset(options={"task_id": index})
        gos = [a for a in env.unwrapped._admissible() if a.startswith("go to ")][:2]
        out[name] = (index, env.game_file(env.task_ids[index]), gos)
    return cache, out


def _alternating(step, gos):
    state = {"i": 0}

    def run():
        state["i"] ^= 1
        step(gos[state["i"]])

    return run


@pytest.mark.parametrize("size", list(SIZES))
def test_step_ours(benchmark, games, size):
    cache, table = games
    index, _, gos = table[size]
    env = AlfWorldEnv(split="valid_seen", cache_dir=cache)
    env.reset(options={"task_id": index})
    benchmark.group = f"alfworld-step-{size}"
    benchmark.extra_info.update(
        compare=f"alfworld-step-{size}", role="ours", goal="<= 0.1 (10x faster)"
    )
    benchmark.pedantic(_alternating(env.step, gos), rounds=40, warmup_rounds=2)


@pytest.mark.parametrize("size", list(SIZES))
def test_step_alfworld(benchmark, games, size):
    _, table = games
    _, path, gos = table[size]
    env = reference_env(path)
    env.reset()
    benchmark.group = f"alfworld-step-{size}"
    benchmark.extra_info.update(compare=f"alfworld-step-{size}", role="baseline")
    benchmark.pedantic(_alternating(lambda c: env.step([c]), gos), rounds=10, warmup_rounds=1)


@pytest.mark.parametrize("size", list(SIZES))
def test_reset_ours(benchmark, games, size):
    cache, table = games
    index, _, _ = table[size]
    env = AlfWorldEnv(split="valid_seen", cache_dir=cache)
    env.reset(options={"task_id": index})
    benchmark.group = f"alfworld-reset-{size}"
    benchmark.extra_info.update(
        compare=f"alfworld-reset-{size}", role="ours", goal="<= 0.2 (5x faster)"
    )
    benchmark.pedantic(lambda: env.reset(options={"task_id": index}), rounds=10, warmup_rounds=1)


@pytest.mark.parametrize("size", list(SIZES))
def test_reset_alfworld(benchmark, games, size):
    _, table = games
    _, path, _ = table[size]
    env = reference_env(path)
    env.reset()
    benchmark.group = f"alfworld-reset-{size}"
    benchmark.extra_info.update(compare=f"alfworld-reset-{size}", role="baseline")
    benchmark.pedantic(env.reset, rounds=3 if size == "large" else 5, warmup_rounds=0)


# ------------------------------------------------------------------ the training reset cycle
SMALL = {"split": "train", "max_receptacles": 12}


def _cycle_times(env, ids, rounds, rng):
    """Seconds of each reset over ``rounds`` cycles of ``ids``, random steps between (untimed)."""
    times = []
    for _ in range(rounds):
        for task in ids:
            start = time.perf_counter()
            obs, info = env.reset(seed=0, options={"task_id": task})
            times.append(time.perf_counter() - start)
            for _ in range(rng.randrange(1, 6)):
                if env.done:
                    break
                info = env.step(rng.choice(info["admissible_actions"]))[4]
    return times


def test_reset_cycle_small_scenes(benchmark, tmp_path_factory):
    """Median reset over 42 small-scene tasks, steps between: reset cache against cold reload."""
    cache = tmp_path_factory.mktemp("alfworld-bench-cycle")
    cached = AlfWorldEnv(cache_dir=cache, **SMALL)
    ids = list(cached.task_ids)
    assert len(ids) >= 40
    cold = AlfWorldEnv(cache_dir=cache, reset_cache=False, **SMALL)
    _cycle_times(cached, ids, 1, random.Random(0))  # every game loaded once (and written)
    hits = cached.reset_cache_stats["hits"]
    ours = _cycle_times(cached, ids, 2, random.Random(1))
    assert cached.reset_cache_stats["hits"] - hits == len(ours)  # every timed reset was a hit
    baseline = _cycle_times(cold, ids, 1, random.Random(1))
    assert cold.reset_cache_stats["hits"] == 0
    med_ours, med_base = statistics.median(ours), statistics.median(baseline)
    ratio = med_ours / med_base
    benchmark.group = "alfworld-reset-cycle-small"
    benchmark.extra_info.update(
        cached_median_s=med_ours,
        cold_median_s=med_base,
        cached_max_s=max(ours),
        tasks=len(ids),
        ratio=ratio,
        goal="cached median <= 20 ms",
    )
    print(
        f"\nalfworld reset cycle, {len(ids)} small-scene tasks, steps between: cached median "
        f"{med_ours * 1e3:.1f} ms (max {max(ours) * 1e3:.1f}, {len(ours)} resets), cold median "
        f"{med_base * 1e3:.1f} ms ({len(baseline)} resets), ratio {ratio:.4f} "
        f"({1 / ratio:.0f}x faster; goal: cached median <= 20 ms)"
    )
    order = iter(ids * 4)
    rng = random.Random(2)

    def between():  # steps on the current game before the next timed reset (untimed)
        for _ in range(rng.randrange(1, 6)):
            if cached.task_id is None or cached.done:
                break
            cached.step(rng.choice(cached.current_info()["admissible_actions"]))

    benchmark.pedantic(
        lambda: cached.reset(seed=0, options={"task_id": next(order)}),
        setup=between,
        rounds=len(ids) * 2,
    )
