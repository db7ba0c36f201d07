"""Held-out splits: ``split="train" | "valid" | "test"`` on every family, disjoint by content."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from budget_envs.registry import registered_ids
from contract_helpers import make

# The BudgetMix families (the test-only toy env registered by conftest has a single task list).
IDS = [i for i in registered_ids() if i.startswith("BudgetMix/")]
SPLITS = ("train", "valid", "test")


def _tasks(env_id, split):
    env = make(env_id, budget=None, split=split, tasks_per_level=2)
    inner = env.unwrapped
    ids = list(inner.task_ids)
    identities = {inner.task_identity(t): t for t in ids}
    env.close()
    return ids, identities


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_splits_are_non_empty_and_disjoint_by_id_and_by_content(env_id):
    found = {split: _tasks(env_id, split) for split in SPLITS}
    for split, (ids, identities) in found.items():
        assert ids, split
        # Within a split every task is its own task too.
        assert len(identities) == len(ids), split
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1 :]:
            assert not set(found[a][0]) & set(found[b][0]), (a, b)
            shared = set(found[a][1]) & set(found[b][1])
            assert not shared, (a, b, [found[a][1][k] for k in shared])


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_train_split_is_the_default_task_list(env_id):
    default = make(env_id, budget=None, tasks_per_level=2)
    train = make(env_id, budget=None, tasks_per_level=2, split="train")
    assert list(default.unwrapped.task_ids) == list(train.unwrapped.task_ids)
    default.close()
    train.close()


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_a_held_out_task_plays(env_id):
    env = make(env_id, budget=5, split="test", tasks_per_level=1)
    first = env.unwrapped.task_ids[0]
    obs, info = env.reset(seed=0, options={"task_id": first})
    assert info["task_id"] == first
    assert info["goal"]
    obs, reward, terminated, truncated, info = env.step("")
    assert info["invalid_action"]
    env.close()


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_an_unknown_split_is_a_typed_error_quoting_it(env_id):
    with pytest.raises(ValueError, match="'holdout'"):
        make(env_id, budget=None, split="holdout")


def test_held_out_ids_are_the_same_in_a_fresh_process():
    code = (
        "import warnings, gymnasium as gym, budget_envs\n"
        "warnings.simplefilter('ignore')\n"
        "e = gym.make('BudgetMix/ToolUse-v0', budget=None, split='test', tasks_per_level=2)\n"
        "t = e.unwrapped.task_ids[0]\n"
        "print(t, e.unwrapped.world_seed, e.unwrapped.task_identity(t)[2:])\n"
    )
    out = []
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        out.append(run.stdout)
    assert out[0].startswith("test/L1-") and out[0] == out[1]


def test_alfworld_accepts_the_common_split_names():
    common = make("BudgetMix/ALFWorld-v0", budget=None, split="test", tasks_per_level=1)
    own = make("BudgetMix/ALFWorld-v0", budget=None, split="valid_unseen", tasks_per_level=1)
    assert common.unwrapped.split == "valid_unseen"
    assert list(common.unwrapped.task_ids) == list(own.unwrapped.task_ids)
    valid = make("BudgetMix/ALFWorld-v0", budget=None, split="valid", tasks_per_level=1)
    assert valid.unwrapped.split == "valid_seen"
