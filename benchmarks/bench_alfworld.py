"""ALFWorld step and reset: BudgetMix/ALFWorld-v0 against alfworld's own path, same games, same run.

alfworld's path is what ``AlfredTWEnv.init_env`` builds: ``textworld.gym`` over the game file with
``AlfredDemangler`` and ``AlfredInfos`` (admissible commands and ``won`` requested). Games: one
generated task each with a small (10-12), medium (~30) and large (45) scene. A step alternates
``go to`` between two receptacles (a state change and a receptacle description every time). A reset
restarts the same game (upstream reloads the game file; ours hits the memoised translation).
Goals: step >= 10x faster, reset >= 5x faster (ratio ours/baseline <= 0.1 and <= 0.2).
"""

from __future__ import annotations

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
