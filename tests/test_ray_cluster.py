"""``budgetmix eval --ray ADDRESS`` and the env-actor pool on a real two-node cluster started with
``ray start`` (head on 127.0.0.1, a second node joining it), as a user runs them: records equal
to a local run's, and envs on both nodes. Only this cluster is stopped afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ray_cluster import cluster_pids, two_node_cluster

POOL_SCRIPT = """
import json, sys
import ray
import gymnasium as gym
import budget_envs
from budget_envs.service.ray_pool import EnvActorPool

address = sys.argv[1]
ray.init(address=address, log_to_driver=False)
nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
out = {"nodes": len(nodes), "cpus": ray.cluster_resources().get("CPU")}
with EnvActorPool("BudgetMix/ToolUse-v0", n_actors=2, envs_per_actor=2, address=address,
                  budget=6) as pool:
    where = [ray.get(a.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))
             for a in pool._actors]
    out["actor_nodes"] = len(set(where))
    first = pool.reset_batch(seeds=range(pool.num_envs))
    local = [gym.make("BudgetMix/ToolUse-v0", budget=6) for _ in range(pool.num_envs)]
    same = True
    infos = []
    for k, (env, (obs, info)) in enumerate(zip(local, first)):
        lobs, linfo = env.reset(seed=k)
        same = same and (obs, info["state_hash"]) == (lobs, linfo["state_hash"])
        infos.append(linfo)
    for _ in range(4):
        actions = [i["candidate_actions"][0] if i["candidate_actions"] else "" for i in infos]
        remote = pool.step_batch(actions)
        infos = []
        for env, a, (obs, r, term, trunc, info) in zip(local, actions, remote):
            lo, lr, lt, ltr, li = env.step(a)
            same = same and (obs, r, term, trunc, info["state_hash"]) == (lo, lr, lt, ltr, li["state_hash"])
            infos.append(li)
    out["same"] = same
print(json.dumps(out))
"""


def _budgetmix() -> list[str]:
    exe = Path(sys.executable).with_name("budgetmix")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "budget_envs.cli"]


def _records(folder: Path) -> list[dict]:
    rows = []
    for line in (folder / "records.jsonl").read_text().splitlines():
        row = json.loads(line)
        row.pop("wall_time", None)
        rows.append(row)
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def _eval(out: Path, *extra: str) -> None:
    args = [
        *_budgetmix(),
        "eval",
        "BudgetMix/ToolUse-v0",
        "--agent",
        "random",
        "--agent",
        "oracle",
        "--tasks",
        "6",
        "--samples",
        "2",
        "--budgets",
        "3,8",
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_eval_and_the_env_pool_on_a_two_node_ray_start_cluster(tmp_path):
    with two_node_cluster() as (address, temp_dir):
        assert cluster_pids(temp_dir)
        done = subprocess.run(
            [sys.executable, "-c", POOL_SCRIPT, address],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        pool = json.loads(done.stdout.strip().splitlines()[-1])
        # two nodes of one CPU each: the pool's two actors (one CPU each) sit one per node
        assert pool == {"nodes": 2, "cpus": 2.0, "actor_nodes": 2, "same": True}
        _eval(tmp_path / "ray", "--ray", address)
    assert not cluster_pids(temp_dir)  # this cluster's processes are gone, and only they
    _eval(tmp_path / "local")
    ray_rows, local_rows = _records(tmp_path / "ray"), _records(tmp_path / "local")
    assert len(ray_rows) == len(local_rows) >= 6 * 2 * 2  # tasks x samples x agents
    assert ray_rows == local_rows
