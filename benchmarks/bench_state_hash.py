"""What ``info["state_hash"]`` costs, and ToolUse's steps/s with and without the row log.

Run: ``.venv/bin/python -m pytest benchmarks/bench_state_hash.py --benchmark-only
-p no:cacheprovider``

* ``state-hash-<family>``: a whole oracle episode (reset and every step) with the hash (role
  ``ours``) against the same episode with ``state_hash`` switched off (``baseline``), same run.
  Goal: at most 1.10 (the hash adds at most 10% to a step).
* ``tooluse-submit``: held-out oracle episodes (steps only, ``submit`` included) with the
  incremental row comparison (``ours``) against the whole-database comparison it replaced
  (``baseline``: a gold database built and compared at ``submit``). Goal: >= 5,000 steps/s.
  These episodes are replays: the fixture played every one of them (to learn its oracle plan)
  on the same env, so every cache of the env and the process is warm.
* ``tooluse-unseen``: the same measure on tasks of the ``test`` split (a world no train task
  uses), 100 tasks over the five levels, two ways in the same run: the first pass, each time in
  a fresh process on a fresh env (``fresh``: every task, and everything the env or the process
  caches about it, new: what a training or evaluation run meets), and the warm replay of the same
  plans on the env that computed them (``warm``, as ``tooluse-submit``). The report prints both,
  the less favourable first, and their ratio. The fresh process builds the split's world at its
  first reset, untimed (reported on its own line).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import warnings

import gymnasium as gym
import pytest

import budget_envs  # noqa: F401
from budget_envs.envs.tooluse import ToolUseEnv

FAMILIES = {
    "tooluse": "BudgetMix/ToolUse-v0",
    "webshop": "BudgetMix/WebShop-v0",
    "textworld": "BudgetMix/TextWorld-CoinCollector-v0",
    "alfworld": "BudgetMix/ALFWorld-v0",
}


def _episode(env_id):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(env_id, budget=None)
    u = env.unwrapped
    env.reset(options={"task_id": 0})
    actions = []
    while not u.done and len(actions) < 30:
        best = u.oracle_actions()
        if not best:
            break
        actions.append(best[0])
        env.step(best[0])
    return env, actions


def _alternate(run, rounds, baseline_on, baseline_off):
    """Min time of ``run`` with the hash and without it, alternating rounds (same caches)."""
    best = {"ours": float("inf"), "baseline": float("inf")}
    for _ in range(rounds):
        for role in ("baseline", "ours"):
            (baseline_on if role == "baseline" else baseline_off)()
            t0 = time.perf_counter()
            run()
            best[role] = min(best[role], time.perf_counter() - t0)
    baseline_off()
    return best


@pytest.mark.parametrize("family", list(FAMILIES))
def test_state_hash_cost(benchmark, family):
    """One oracle episode (reset and every step) with and without ``state_hash``."""
    env, actions = _episode(FAMILIES[family])
    cls = type(env.unwrapped)
    real = cls.state_hash
    step = env.step

    def run():
        env.reset(options={"task_id": 0})
        for a in actions:
            step(a)

    def off():
        cls.state_hash = lambda self: None

    def on():
        cls.state_hash = real

    slow = family in ("textworld", "alfworld")
    run()
    best = _alternate(run, 10 if slow else 40, baseline_on=off, baseline_off=on)
    benchmark.group = f"state-hash-{family}"
    benchmark.pedantic(run, rounds=3 if slow else 10)
    ratio = best["ours"] / best["baseline"]
    benchmark.extra_info.update(best, ratio=ratio, goal="<= 1.10")
    print(
        f"\nstate-hash {family}: episode with hash {best['ours'] * 1e3:.3f} ms, without "
        f"{best['baseline'] * 1e3:.3f} ms, ratio {ratio:.3f} (goal <= 1.10)"
    )
    env.close()


def _whole_database_check(self) -> bool:
    """The comparison ``submit`` made before the row log: build the gold database, compare."""
    gold = self.gold_connection()
    try:
        orders, items = set(), set()
        for kind, target in list(self._gold.slots) + list(self._pr.changed):
            (items if kind == "item" else orders).add(target)
        for table, ids in (("orders", orders), ("order_items", items)):
            for rid in sorted(ids):
                sql = f"SELECT * FROM {table} WHERE id=?"
                if (
                    self._conn.execute(sql, (rid,)).fetchone()
                    != gold.execute(sql, (rid,)).fetchone()
                ):
                    return False
        sql = "SELECT * FROM refunds ORDER BY item_id"
        return self._conn.execute(sql).fetchall() == gold.execute(sql).fetchall()
    finally:
        gold.close()


@pytest.fixture(scope="module")
def held_out():
    """100 held-out oracle episodes (the last task ids of each level), with their actions."""
    env = ToolUseEnv()
    ids = [t for t in env.task_ids if int(t.split("-")[1]) >= 4900][::5]
    return env, _oracle_plans(env, ids)


def _replay_steps(env, plans):
    """Play every plan on ``env`` (resets untimed); the summed step time."""
    total = 0.0
    for tid, plan in plans:
        env.reset(options={"task_id": tid})
        t0 = time.perf_counter()
        for a in plan:
            env.step(a)
        total += time.perf_counter() - t0
        assert env.won
    return total


def _oracle_plans(env, ids):
    """The oracle's actions for each task id, played on ``env`` (which is then warm)."""
    plans = []
    for tid in ids:
        env.reset(options={"task_id": tid})
        plan = []
        while not env.done:
            plan.append(env.oracle_actions()[0])
            env.step(plan[-1])
        assert env.won
        plans.append((tid, plan))
    return plans


@pytest.mark.parametrize("role", ["baseline", "ours"])
def test_tooluse_oracle_episodes(benchmark, held_out, role, monkeypatch):
    env, plans = held_out
    if role == "baseline":
        monkeypatch.setattr(ToolUseEnv, "_db_matches_gold", _whole_database_check)
    steps = sum(len(p) for _, p in plans)
    benchmark.group = "tooluse-submit"
    times = []

    def run():  # every episode; resets untimed, the sum of step times recorded
        times.append(_replay_steps(env, plans))

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    per_second = steps / min(times)
    benchmark.extra_info.update(role=role, steps=steps, steps_per_second=per_second)
    print(f"\ntooluse oracle episodes ({role}): {per_second:,.0f} steps/s over {steps} steps")


#: The unseen tasks: every 250th id of the ``test`` split (20 per level, levels 1-5).
UNSEEN_EVERY = 250
#: Fresh processes of the first pass (the fastest counts, as the fastest round elsewhere).
FRESH_RUNS = 3
FRESH_PASS = """
import json, sys, time
from budget_envs.envs.tooluse import ToolUseEnv

plans = json.load(open(sys.argv[1]))
env = ToolUseEnv(split="test")
t0 = time.perf_counter()
env.reset(options={"task_id": plans[0][0]})  # builds the split's world: reported apart
world_s = time.perf_counter() - t0
steps = resets = 0
step_s = reset_s = 0.0
for tid, plan in plans:
    t0 = time.perf_counter()
    env.reset(options={"task_id": tid})
    reset_s += time.perf_counter() - t0
    resets += 1
    t0 = time.perf_counter()
    for action in plan:
        env.step(action)
    step_s += time.perf_counter() - t0
    steps += len(plan)
    if not env.won:
        raise SystemExit(f"the oracle plan of {tid} did not win in a fresh process")
print(json.dumps({"steps": steps, "step_s": step_s, "resets": resets, "reset_s": reset_s,
                  "world_s": world_s}))
"""


@pytest.fixture(scope="module")
def unseen():
    """Oracle plans of 100 ``test``-split tasks, computed on this env (which is then warm)."""
    env = ToolUseEnv(split="test")
    ids = list(env.task_ids[::UNSEEN_EVERY])
    assert len(ids) == 100 and {env.task_level(t) for t in ids} == {1, 2, 3, 4, 5}
    return env, _oracle_plans(env, ids)


def _fresh_pass(plans):
    """One first pass over ``plans`` in a new interpreter: its step and reset seconds."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(plans, f)
        f.flush()
        out = subprocess.run(
            [sys.executable, "-c", FRESH_PASS, f.name],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


UNSEEN: dict[str, dict] = {}


@pytest.mark.parametrize("role", ["fresh", "warm"])
def test_tooluse_unseen_tasks(benchmark, unseen, role):
    """Steps/s of oracle episodes on unseen tasks: first pass in a fresh process vs warm replay."""
    env, plans = unseen
    steps = sum(len(p) for _, p in plans)
    benchmark.group = "tooluse-unseen"
    runs: list[dict] = []

    if role == "fresh":

        def run():
            runs.append(_fresh_pass(plans))

        benchmark.pedantic(run, rounds=FRESH_RUNS, iterations=1)
    else:

        def run():  # resets untimed, the sum of step times recorded
            runs.append({"steps": steps, "step_s": _replay_steps(env, plans)})

        benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    best = min(runs, key=lambda r: r["step_s"])
    assert best["steps"] == steps
    UNSEEN[role] = best
    per_second = steps / best["step_s"]
    benchmark.extra_info.update(role=role, steps=steps, steps_per_second=per_second)
    if role == "fresh":
        benchmark.extra_info.update(
            resets_per_second=best["resets"] / best["reset_s"], world_build_s=best["world_s"]
        )
    if len(UNSEEN) == 2:
        _report_unseen(steps, len(plans))


def _report_unseen(steps, tasks):
    fresh, warm = UNSEEN["fresh"], UNSEEN["warm"]
    rates = {"fresh": steps / fresh["step_s"], "warm": steps / warm["step_s"]}
    label = {
        "fresh": "first pass, fresh process and env",
        "warm": "warm replay, same env, same plans",
    }
    lines = [f"\ntooluse unseen tasks (test split, {tasks} tasks, {steps} oracle steps):"]
    for role in sorted(rates, key=rates.get):  # the less favourable figure first
        lines.append(f"  {label[role]}: {rates[role]:,.0f} steps/s")
    lines.append(f"  first pass / warm replay: {rates['fresh'] / rates['warm']:.2f}")
    lines.append(
        f"  first pass resets: {fresh['resets'] / fresh['reset_s']:,.0f}/s; the split's world "
        f"built at the first reset in {fresh['world_s']:.2f} s (untimed above)"
    )
    print("\n".join(lines))
