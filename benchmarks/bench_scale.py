"""Live envs in one process: what each extra env costs at 1, 16, 128 and 1,024 of them.

Run: ``.venv/bin/python -m pytest benchmarks/bench_scale.py --benchmark-only -p no:cacheprovider``
(``SCALE_SIZES=1,16,128,1024`` and ``SCALE_FAMILIES=tooluse,webshop,textworld,alfworld`` by
default). Each (family, count) runs in a fresh interpreter, so its memory is its own:

* ``scale-<family>-<n>``: build and first reset of ``n`` envs made with ``gym.make`` and kept
  alive together, then one oracle step of each. Reported per env: resident memory added, build
  + first reset seconds, step p50 and p99; for the process: threads and open file descriptors
  with all ``n`` live. ALFWorld plays at most 64 distinct tasks (the 16 tasks x 8 samples shape
  of LLM agent RL); parsing them, once per process, is timed apart (``parse_s``) and the envs
  are built after it, on tasks already parsed.
* ``scale-vec-<family>``: one batched step of ``make_vec(..., vectorization_mode="sync")`` over
  1,024 envs (the second step of each episode: the first carries Gymnasium's env checker's
  one-time checks) against the same 1,024 envs stepped one at a time from the same states, in
  the same process: once reading nothing of the info (the less favourable ratio) and once
  reading all of it, as the vector env's batching does. Goal: at most 2x.

Every row goes to ``benchmarks/results/scale.json`` (merged by family and count) with its ratios
against the 16-env row of the same family (memory and build per env, step p50).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

RESULTS = pathlib.Path(__file__).parent / "results" / "scale.json"
SIZES = [int(n) for n in os.environ.get("SCALE_SIZES", "1,16,128,1024").split(",") if n]
FAMILIES = [
    f
    for f in os.environ.get("SCALE_FAMILIES", "tooluse,webshop,textworld,alfworld").split(",")
    if f
]
#: The env each family is measured on (small ALFWorld scenes: the shape trainers use).
SPECS = {
    "tooluse": ("BudgetMix/ToolUse-v0", {}),
    "webshop": ("BudgetMix/WebShop-v0", {"level": 2}),
    "textworld": ("BudgetMix/TextWorld-v0", {"level": 1}),
    "alfworld": (
        "BudgetMix/ALFWorld-v0",
        {"level": 1, "tasks_per_level": 64, "split": "train", "max_receptacles": 15},
    ),
}
#: Distinct tasks the envs of a run play (ALFWorld's parse is per task and per process).
DISTINCT = {"alfworld": 64}

PROBE = r"""
import json, os, sys, threading, time, warnings
warnings.simplefilter("ignore")
import gymnasium as gym
import numpy as np
import budget_envs

env_id, kwargs, n, distinct, mode = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5]

def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

def os_threads():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])

def fds():
    return len(os.listdir("/proc/self/fd"))

ROUNDS = 3

def action(env, info):
    best = env.unwrapped.oracle_actions()
    return best[0] if best else info["candidate_actions"][0]

probe = gym.make(env_id, **kwargs)
ids = list(probe.unwrapped.task_ids)
tasks = [ids[i % min(distinct, len(ids))] for i in range(n)]
t0 = time.perf_counter()
for tid in dict.fromkeys(tasks):  # parse every distinct task once (per process), untimed below
    probe.reset(options={"task_id": tid})
parse_s = time.perf_counter() - t0
out = {"parse_s": parse_s, "distinct_tasks": len(set(tasks))}
base_rss, base_threads, base_fds = rss_mb(), os_threads(), fds()

if mode == "live":
    t0 = time.perf_counter()
    envs, infos = [], []
    for tid in tasks:
        env = gym.make(env_id, **kwargs)
        infos.append(env.reset(options={"task_id": tid})[1])
        envs.append(env)
    build_s = time.perf_counter() - t0
    live_rss, live_threads, live_fds = rss_mb(), os_threads(), fds()
    steps = []
    for env, info in zip(envs, infos):
        a = action(env, info)
        t0 = time.perf_counter()
        env.step(a)
        steps.append(time.perf_counter() - t0)
    out.update(
        n=n, mb_per_env=(live_rss - base_rss) / n, build_reset_s_per_env=build_s / n,
        step_p50_ms=float(np.percentile(steps, 50)) * 1e3,
        step_p99_ms=float(np.percentile(steps, 99)) * 1e3,
        threads=live_threads, threads_added=live_threads - base_threads,
        fds=live_fds, fds_added=live_fds - base_fds, rss_mb=live_rss,
    )
    for env in envs:
        env.close()
else:  # one batched step of a sync vector env against single steps of as many envs
    vec = gym.make_vec(env_id, num_envs=n, vectorization_mode="sync", **kwargs)

    def oracle_step():  # each env's oracle action now (its first offered one past the end)
        return [action(e, {"candidate_actions": ["look"]}) for e in vec.envs]

    batched = float("inf")
    timed = {False: float("inf"), True: float("inf")}
    for _ in range(ROUNDS):  # the fastest round of each, alternating (same memory state)
        vec.reset(seed=0, options={"task_id": tasks[0]})
        vec.step(oracle_step())  # each episode's first step (and the env checker's checks)
        acts = oracle_step()
        t0 = time.perf_counter()
        vec.step(acts)
        batched = min(batched, time.perf_counter() - t0)
        for read in (False, True):  # the same states again, one env at a time
            todo = []
            for e in vec.envs:
                e.reset(options={"task_id": tasks[0]})
                e.step(action(e, {"candidate_actions": ["look"]}))
                todo.append((e, action(e, {"candidate_actions": ["look"]})))
            t0 = time.perf_counter()
            for e, a in todo:
                info = e.step(a)[4]
                if read:  # every value of the info, as the vector env's batching reads them
                    dict(info)
            timed[read] = min(timed[read], time.perf_counter() - t0)
    out.update(n=n, batched_s=batched, singles_s=timed[False], singles_read_s=timed[True],
               ratio=batched / timed[False], ratio_read=batched / timed[True])
    vec.close()
print(json.dumps(out))
"""


def _probe(family: str, n: int, mode: str = "live") -> dict:
    env_id, kwargs = SPECS[family]
    distinct = DISTINCT.get(family, n)
    args = [sys.executable, "-c", PROBE, env_id, json.dumps(kwargs), str(n), str(distinct), mode]
    done = subprocess.run(args, capture_output=True, text=True, timeout=5400, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _save(key: str, row: dict) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[key] = row
    for k, v in data.items():  # ratios against the 16-env row of the same family
        fam = k.rpartition("-")[0]
        ref = data.get(f"{fam}-16")
        if ref and "mb_per_env" in v:
            v["vs_16"] = {
                m: round(v[m] / ref[m], 3) if ref[m] else None
                for m in ("mb_per_env", "build_reset_s_per_env", "step_p50_ms")
            }
    RESULTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("family", FAMILIES)
def test_live_envs(benchmark, family, n):
    rows = []
    benchmark.group = f"scale-{family}"
    benchmark.pedantic(lambda: rows.append(_probe(family, n)), rounds=1, iterations=1)
    row = rows[-1]
    benchmark.extra_info.update(row, family=family)
    _save(f"{family}-{n}", row)
    print(
        f"\nscale {family} x{n}: {row['mb_per_env']:.2f} MB/env, "
        f"{row['build_reset_s_per_env'] * 1e3:.1f} ms build+reset/env, step p50 "
        f"{row['step_p50_ms']:.2f} ms p99 {row['step_p99_ms']:.2f} ms, threads {row['threads']} "
        f"(+{row['threads_added']}), fds {row['fds']} (+{row['fds_added']}), parse "
        f"{row['parse_s']:.1f} s for {row['distinct_tasks']} tasks"
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_batched_step(benchmark, family):
    n = max(SIZES)
    rows = []
    benchmark.group = f"scale-vec-{family}"
    benchmark.pedantic(lambda: rows.append(_probe(family, n, "vec")), rounds=1, iterations=1)
    row = rows[-1]
    benchmark.extra_info.update(row, family=family, goal="<= 2.0")
    _save(f"vec-{family}-{n}", row)
    print(
        f"\nscale-vec {family} x{n}: batched step {row['batched_s'] * 1e3:.0f} ms, {n} single "
        f"steps {row['singles_s'] * 1e3:.0f} ms (ratio {row['ratio']:.2f}), the same reading "
        f"their info {row['singles_read_s'] * 1e3:.0f} ms (ratio {row['ratio_read']:.2f}); "
        "goal <= 2.0"
    )
