"""Hostile callers and broken records lose nothing: closed envs, foreign snapshots, bounded
ToolUse caches, and a web shop whose sessions and threads other clients cannot take away."""

from __future__ import annotations

from budget_envs.registry import registered_ids
from contract_helpers import TOY_ID, make

from budget_envs.envs.tooluse import ToolUseEnv
from budget_envs.envs.tooluse.lru import BLOCK_CACHE_SIZE, MEMO_SIZE

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
    # by the oracle, which is what fills the candidate-call blocks.
    for n in range(2400):
        obs, info = env.reset(options={"task_id": (n * 7919) % len(ids)})
        if n % 8 == 0:
            while not env.done:
                env.step(env.oracle_actions()[0])
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
