"""ALFWorld: alfworld 0.3's ``put X in/on Y`` runs as ``move X to Y`` wherever that is admissible."""

from __future__ import annotations

import pytest

from budget_envs.envs.alfworld import AlfWorldEnv


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("alfworld-legacy-cache")


def _states_with_moves(env, task_index):
    """Play the oracle; yield a snapshot at every state that admits a ``move X to Y``."""
    obs, info = env.reset(seed=0, options={"task_id": task_index})
    while not env.done:
        moves = [a for a in info["admissible_actions"] if a.startswith("move ")]
        if moves:
            yield env.snapshot(), moves
        obs, _, _, _, info = env.step(env.oracle_actions()[0])


@pytest.mark.parametrize("task_index", [0, 1])
def test_put_in_on_is_a_valid_turn_wherever_move_to_is_admissible(cache, task_index):
    env = AlfWorldEnv(split="valid_seen", cache_dir=cache, tasks_per_level=1)
    checked = 0
    # Every move of the first two states along the oracle's path that admit one (each check
    # restores a snapshot, a prefix replay, so the whole path would be slow).
    for (snap, moves), _ in zip(_states_with_moves(env, task_index), range(2)):
        for move in moves:
            obj, dest = move[len("move ") :].split(" to ", 1)
            env.restore(snap)
            expected = env.step(move)
            for legacy in (
                f"put {obj} in/on {dest}",
                f"put {obj} in {dest}",
                f"put {obj} on {dest}",
            ):
                env.restore(snap)
                obs, reward, terminated, truncated, info = env.step(legacy)
                assert not info["invalid_action"], legacy
                assert info["action_alias"] == move
                assert (obs, reward, terminated) == expected[:3]
                assert env.trace[-1] == ("step", legacy)
                checked += 1
    assert checked > 0
    env.close()


def test_the_alias_is_off_with_legacy_put_false_and_absent_on_other_turns(cache):
    env = AlfWorldEnv(split="valid_seen", cache_dir=cache, tasks_per_level=1, legacy_put=False)
    snap, moves = next(_states_with_moves(env, 0))
    obj, dest = moves[0][len("move ") :].split(" to ", 1)
    obs, _, _, _, info = env.step(f"put {obj} in/on {dest}")
    assert info["invalid_action"] and obs == "Nothing happens."
    assert "action_alias" not in info
    env.restore(snap)
    obs, _, _, _, info = env.step(moves[0])
    assert not info["invalid_action"] and "action_alias" not in info
    env.close()


def test_a_put_whose_move_is_not_admissible_is_rejected(cache):
    env = AlfWorldEnv(split="valid_seen", cache_dir=cache, tasks_per_level=1)
    env.reset(seed=0, options={"task_id": 0})
    obs, _, _, _, info = env.step("put unicorn 7 in/on moon 1")
    assert info["invalid_action"] and obs == "Nothing happens."
    assert "action_alias" not in info
    with pytest.raises(TypeError, match="legacy_put"):
        AlfWorldEnv(cache_dir=cache, legacy_put="yes")
    env.close()
