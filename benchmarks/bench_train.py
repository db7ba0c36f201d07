"""Training throughput: env steps/s of the PPO phase of ``budgetmix train`` (RLlib).

Run: ``.venv/bin/python -m pytest benchmarks/bench_train.py --benchmark-only -p no:cacheprovider``
(``BENCH_TRAIN_LOAD=4`` adds four busy processes beside it: a load of about 5 on two cores;
``BENCH_TRAIN_FAMILIES=tooluse`` runs one family).

For each family (ToolUse level 1, WebShop level 2, ALFWorld small scenes) three figures come from
the same run:

* ``new``: :func:`~budget_envs.integrations.rllib.training.train` with its defaults (packed scoring,
  16 envs per runner with batched inference, one torch thread, 256 slots growing on demand,
  width 64, batch 1024 in minibatches of 512);
* ``legacy``: the same call with :data:`~budget_envs.integrations.rllib.training.LEGACY_SPEED`, the
  configuration before those defaults (every slot scored, one env, 2048 slots, width 128, batch
  512, torch's threads), and for ALFWorld the env's reset cache off (``reset_cache=False``);
* ``raw``: the family's env alone, random offered actions (``info["candidate_actions"]``), no
  features, no network; the same seeded loop twice, the second timed (warm caches: ALFWorld's
  reset cache holds every task by then, which a first pass would spend most of its time
  loading).

The PPO phase's rate is read from the ``metrics.csv`` the call writes: env steps over wall time
from the end of the first iteration (which holds warm-up) to the end of the last, so Ray's start,
the algorithm's build and the first iteration are not counted. The ratios printed at the end are
times per env step: ``train_vs_legacy/<family>`` new / legacy (0.1 = ten times faster; goals:
ToolUse 0.1, ALFWorld 0.2) and ``train_vs_raw/<family>`` new / raw (10 = training at 10% of the
raw loop's rate; goal on ToolUse: at most 10 on a quiet machine, 20 at a load of about 5).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import pytest

pytest.importorskip("ray")

from budget_envs.integrations.rllib.training import LEGACY_SPEED, read_metrics, train  # noqa: E402

CASES = {
    "tooluse": ("BudgetMix/ToolUse-v0", {"level": 1}, 12, {}),
    "webshop": ("BudgetMix/WebShop-v0", {"level": 2, "tasks_per_level": 200}, 15, {}),
    "alfworld": (
        "BudgetMix/ALFWorld-v0",
        {"level": 1, "tasks_per_level": 100, "max_receptacles": 12},
        15,
        {"reset_cache": False},
    ),
}
#: Iterations per run: the rate is taken over all but the first.
ITERATIONS = {"new": 6, "legacy": 2}
RAW_STEPS = {"tooluse": 20_000, "webshop": 3_000, "alfworld": 2_000}
FAMILIES = [
    f for f in os.environ.get("BENCH_TRAIN_FAMILIES", ",".join(CASES)).split(",") if f in CASES
]
GOALS = {
    "train_vs_legacy/tooluse": "<= 0.1 (10x the old configuration)",
    "train_vs_legacy/alfworld": "<= 0.2 (5x the old configuration)",
    "train_vs_raw/tooluse": "<= 10 quiet, <= 20 at load ~5 (10% / 5% of the raw loop)",
}


@pytest.fixture(scope="module", autouse=True)
def load():
    """``BENCH_TRAIN_LOAD`` busy processes beside the benchmark, for the whole module."""
    n = int(os.environ.get("BENCH_TRAIN_LOAD", "0"))
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield n
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _ppo_seconds_per_step(rows: list[dict[str, float]]) -> float:
    assert len(rows) >= 2, "need two iterations: the first holds warm-up"
    steps = rows[-1]["timesteps"] - rows[0]["timesteps"]
    wall = rows[-1]["wall_s"] - rows[0]["wall_s"]
    assert steps > 0 and wall > 0, rows
    return wall / steps


def _train(family: str, path: str) -> list[dict[str, float]]:
    env_id, kwargs, budget, legacy_kwargs = CASES[family]
    speed = dict(LEGACY_SPEED) if path == "legacy" else {}
    env_kwargs = dict(kwargs, **(legacy_kwargs if path == "legacy" else {}))
    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = train(
            env_id,
            budget=budget,
            env_kwargs=env_kwargs,
            out_dir=out,
            iterations=ITERATIONS[path],
            warm_start_episodes=0,
            checkpoint_every=1000,
            **speed,
        )
        rows = read_metrics(out)
    assert len(rows) == result["iterations"] == ITERATIONS[path]
    return rows


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("path", ["new", "legacy"])
def test_ppo_phase(benchmark, family, path, load):
    rows = benchmark.pedantic(_train, args=(family, path), rounds=1, iterations=1)
    per_step = _ppo_seconds_per_step(rows)
    compare = [f"train_vs_legacy/{family}"] + ([f"train_vs_raw/{family}"] if path == "new" else [])
    benchmark.extra_info.update(
        compare=compare,
        role="ours" if path == "new" else "baseline",
        seconds_per_call=per_step,
        steps_per_s=round(1 / per_step, 1),
        load_processes=load,
        goal={name: GOALS.get(name, "") for name in compare},
    )


def _raw_loop(family: str) -> tuple[int, float]:
    import gymnasium as gym

    import budget_envs  # noqa: F401

    env_id, kwargs, budget, _ = CASES[family]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(env_id, budget=budget, **kwargs)
    try:
        for _ in range(2):  # the first pass warms the env's caches; the second, the same, is timed
            rng = np.random.default_rng(0)
            _, info = env.reset(seed=0)
            start = time.perf_counter()
            for _ in range(RAW_STEPS[family]):
                offered = info.get("candidate_actions") or info.get("admissible_actions") or [""]
                action = offered[int(rng.integers(len(offered)))]
                _, _, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    _, info = env.reset()
            wall = time.perf_counter() - start
        return RAW_STEPS[family], wall
    finally:
        env.close()


@pytest.mark.parametrize("family", FAMILIES)
def test_raw_env_loop(benchmark, family, load):
    steps, wall = benchmark.pedantic(_raw_loop, args=(family,), rounds=1, iterations=1)
    benchmark.extra_info.update(
        compare=f"train_vs_raw/{family}",
        role="baseline",
        seconds_per_call=wall / steps,
        steps_per_s=round(steps / wall, 1),
        load_processes=load,
        goal=GOALS.get(f"train_vs_raw/{family}", ""),
    )
