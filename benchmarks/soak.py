"""Soak: step one env id many times in one process and watch what it holds on to.

Usage::

    python benchmarks/soak.py BudgetMix/ToolUse-v0 --steps 100000 --json out.json

The id runs under its full default stack (BudgetWrapper, plus ErrorInjection at a low rate of the
generic kinds) with a seeded mix of oracle moves, admissible actions, made-up commands and
malformed input, resetting over a fixed pool of tasks whenever an episode ends. Every
``--every`` steps (after a ``gc.collect()``) it samples the resident set size, open file
descriptors, OS threads, child processes and the files under a private temporary directory
(``TMPDIR`` is pointed at a fresh one before anything is imported). The JSON holds every sample
and the growth from ``--warm`` steps (after the caches have filled) to the end.

Linux only (it reads ``/proc/self``). ``tests/test_soak.py`` runs it and checks the bounds.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

#: Malformed or made-up input mixed into the soak (the core rejects some, the family the rest).
JUNK = (
    "",
    "   ",
    "xyzzy plugh",
    "go\x00north",
    "x" * 5000,
    "ñandú über straße",
    '{"tool_calls": [{"name": "x", "arguments": "{broken',
    "[" * 300,
    "click[no such button]",
    "search[]",
)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _threads() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise RuntimeError("no Threads: line in /proc/self/status")


def _children() -> int:
    me = str(os.getpid())
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        # the fields after the command name (which may hold spaces) start with state, ppid
        if stat.rsplit(")", 1)[1].split()[1] == me:
            count += 1
    return count


def _temp_files(root: Path) -> int:
    return sum(len(files) + len(dirs) for _, dirs, files in os.walk(root))


def sample(step: int, tmp: Path, start: float) -> dict:
    gc.collect()
    return {
        "step": step,
        "rss_mb": round(_rss_bytes() / 2**20, 2),
        "open_fds": len(os.listdir("/proc/self/fd")),
        "threads": _threads(),
        "children": _children(),
        "temp_files": _temp_files(tmp),
        "seconds": round(time.perf_counter() - start, 1),
    }


def soak(env_id: str, steps: int, *, every: int, warm: int, tasks: int, seed: int) -> dict:
    import gymnasium as gym
    import numpy as np

    import budget_envs  # noqa: F401  (registers the ids)

    tmp = Path(tempfile.gettempdir())
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(
            env_id, budget=30, faults={"kinds": ["slip", "drop", "garble"], "rate": 0.03, "seed": 0}
        )
    unwrapped = env.unwrapped
    pool = min(tasks, len(unwrapped.task_ids))
    start = time.perf_counter()
    obs, info = env.reset(seed=seed, options={"task_id": 0})
    samples = [sample(0, tmp, start)]
    episodes = invalid = 0
    max_obs = len(obs)
    for step in range(1, steps + 1):
        draw = rng.random()
        if draw < 0.5:
            best = unwrapped.oracle_actions()
            action = best[int(rng.integers(len(best)))] if best else "look"
        elif draw < 0.75 and hasattr(unwrapped, "sample_action"):
            action = unwrapped.sample_action(rng)
        elif draw < 0.9 and info["admissible_actions"]:
            options = info["admissible_actions"]
            action = options[int(rng.integers(len(options)))]
        else:
            action = JUNK[int(rng.integers(len(JUNK)))]
        obs, _, terminated, truncated, info = env.step(action)
        invalid += bool(info["invalid_action"])
        max_obs = max(max_obs, len(obs))
        if terminated or truncated:
            episodes += 1
            obs, info = env.reset(
                seed=int(rng.integers(2**31)), options={"task_id": int(rng.integers(pool))}
            )
        if step % every == 0 or step == steps:
            samples.append(sample(step, tmp, start))
    env.close()
    after_close = sample(steps, tmp, start)
    at_warm = min(samples, key=lambda s: abs(s["step"] - warm))
    end = samples[-1]
    return {
        "env_id": env_id,
        "steps": steps,
        "episodes": episodes,
        "invalid_actions": invalid,
        "max_observation_chars": max_obs,
        "observation_limit": env.observation_space.max_length,
        "warm_step": at_warm["step"],
        "rss_growth_mb": round(end["rss_mb"] - at_warm["rss_mb"], 2),
        "open_fds_growth": end["open_fds"] - at_warm["open_fds"],
        "threads_growth": end["threads"] - at_warm["threads"],
        "children_growth": end["children"] - at_warm["children"],
        "temp_files_growth": end["temp_files"] - at_warm["temp_files"],
        "max": {
            k: max(s[k] for s in samples)
            for k in ("rss_mb", "open_fds", "threads", "children", "temp_files")
        },
        "after_close": after_close,
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_id")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=10_000, help="sample every N steps")
    parser.add_argument("--warm", type=int, default=20_000, help="growth is measured from here")
    parser.add_argument("--tasks", type=int, default=8, help="resets draw from the first N tasks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the result here too")
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        parser.error("the soak reads /proc/self: Linux only")
    result = soak(
        args.env_id, args.steps, every=args.every, warm=args.warm, tasks=args.tasks, seed=args.seed
    )
    text = json.dumps(result, indent=2)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    summary = {k: v for k, v in result.items() if k not in ("samples", "after_close")}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    # A private temporary directory, set before anything imports tempfile's default.
    private = tempfile.mkdtemp(prefix="budgetmix-soak-")
    os.environ["TMPDIR"] = private
    tempfile.tempdir = private
    try:
        sys.exit(main())
    finally:
        leftover = sum(len(f) + len(d) for _, d, f in os.walk(private))
        if leftover == 0:
            os.rmdir(private)
