"""One task-count name and list-valued ``level=`` on every product family (registry-parametrized)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from budget_envs.registry import registered_ids

PRODUCT_IDS = registered_ids(include_extra=False)


def _ids(env_id, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        env = gym.make(env_id, budget=None, **kwargs)
    try:
        return list(env.unwrapped.task_ids)
    finally:
        env.close()


def test_every_product_family_is_covered():
    assert len(PRODUCT_IDS) >= 4


@pytest.mark.parametrize("env_id", PRODUCT_IDS)
def test_level_list_and_tasks_per_level(env_id):
    both = _ids(env_id, level=[1, 2], tasks_per_level=2)
    one = _ids(env_id, level=1, tasks_per_level=2)
    two = _ids(env_id, level=[2], tasks_per_level=2)
    assert len(both) == 4 and len(set(both)) == 4
    assert len(one) == 2 and len(two) == 2
    assert set(one) | set(two) == set(both) and not set(one) & set(two)
    # a larger count extends a smaller one
    assert set(one) <= set(_ids(env_id, level=[1], tasks_per_level=3))


@pytest.mark.parametrize("env_id", PRODUCT_IDS)
def test_bad_levels_and_counts_are_refused(env_id):
    with pytest.raises(ValueError, match=r"\[1, 99999\]"):
        _ids(env_id, level=[1, 99999])
    with pytest.raises(ValueError, match=r"\[\]"):
        _ids(env_id, level=[])
    with pytest.raises(ValueError, match="twice"):
        _ids(env_id, level=[1, 1])
    with pytest.raises(ValueError, match="tasks_per_level.*got 0"):
        _ids(env_id, tasks_per_level=0)
    with pytest.raises(TypeError, match="tasks_per_level.*'3'"):
        _ids(env_id, tasks_per_level="3")


def test_textworld_seed_count_is_the_deprecated_task_count():
    with pytest.warns(DeprecationWarning, match="tasks_per_level"):
        old = _ids("BudgetMix/TextWorld-v0", level=[1, 2], seeds=3)
    assert old == _ids("BudgetMix/TextWorld-v0", level=[1, 2], tasks_per_level=3)
    # an explicit seed list stays, and is not a count
    assert _ids("BudgetMix/TextWorld-v0", level=2, seeds=[5, 7]) == ["custom-L2-s5", "custom-L2-s7"]
    with pytest.raises(ValueError, match="not both"):
        _ids("BudgetMix/TextWorld-v0", seeds=[1], tasks_per_level=2)
