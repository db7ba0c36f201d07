"""TextAgentEnv details that every family inherits."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest
from toy_env import ToyEnv

from budget_envs.core import Snapshot, TextAgentEnv
from budget_envs.errors import SnapshotMismatch, UnknownFaultKind


class Chatty(ToyEnv):
    """The toy env with an observation far over the limit and non-ASCII text."""

    def _load(self, task_id):
        super()._load(task_id)
        return "Grüße \x07 " + "word " * 5000


def test_observations_stay_inside_the_space():
    env = Chatty()
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert "observation cut" in obs
    assert obs.startswith("Gr??e ? ")


def test_step_before_reset_is_a_programming_error():
    with pytest.raises(gym.error.ResetNeeded):
        ToyEnv().step("look")


def test_the_end_of_an_episode_is_remembered():
    env = ToyEnv()
    env.reset(seed=0)
    while not env.done:
        obs, reward, terminated, _, info = env.step(env.oracle_actions()[0])
    assert terminated and info["won"]
    obs, reward, terminated, truncated, info = env.step("look")
    assert terminated and info["won"] and info["invalid_action"] and reward == 0.0
    assert "over" in obs and info["admissible_actions"] == []


def test_lost_terminates():
    env = ToyEnv()
    env.reset(options={"task_id": 0})
    while "smash door" not in env.current_info()["admissible_actions"]:
        env.step("go east")
    obs, reward, terminated, truncated, info = env.step("smash door")
    assert terminated and info["lost"] and not info["won"] and not truncated
    assert env.oracle_actions() == []


def test_invalid_feedback_names_the_problem():
    env = ToyEnv()
    env.reset(seed=1)
    assert "empty" in env.step("")[0]
    assert "over the limit" in env.step("x" * 10_000)[0]
    assert "control characters" in env.step("look\x00")[0]
    assert "expected text" in env.step(None)[0]
    assert "can't do" in env.step("dance")[0]


def test_render_ansi_and_bad_render_mode():
    env = ToyEnv(render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert env.render() == obs
    with pytest.raises(ValueError, match="'human'"):
        ToyEnv(render_mode="human")
    with pytest.raises(ValueError, match="-1"):
        ToyEnv(max_action_length=-1)


def test_restore_rejects_foreign_objects_and_snapshot_is_value_like():
    env = ToyEnv()
    env.reset(seed=3)
    snap = env.snapshot()
    assert isinstance(snap, Snapshot) and snap.trace == ()
    with pytest.raises(SnapshotMismatch, match="not a Snapshot"):
        env.restore({"task_id": "toy-000"})


def test_restore_into_a_fresh_env():
    a = ToyEnv()
    a.reset(seed=3)
    a.step(a.oracle_actions()[0])
    snap = a.snapshot()
    b = ToyEnv()
    assert b.restore(snap) == snap.observation
    assert b.cost_to_go() == a.cost_to_go() and b.task_id == a.task_id


def test_unknown_family_fault_kind():
    env = ToyEnv()
    env.reset(seed=0)
    with pytest.raises(UnknownFaultKind, match="'quake'"):
        env.arm_fault("quake", env.np_random)
    with pytest.raises(ValueError, match="'quake'"):  # also a ValueError, as before
        env.arm_fault("quake", env.np_random)


def test_import_is_light_and_silent(tmp_path):
    code = (
        "import sys, budget_envs, budget_envs.wrappers, budget_envs.registry\n"
        "heavy = [m for m in ('textworld', 'alfworld', 'ray', 'torch', 'trl', 'matplotlib') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and out.stderr == ""
    assert list(tmp_path.iterdir()) == []


def test_base_class_is_abstract_enough():
    env = TextAgentEnv()
    with pytest.raises(NotImplementedError):
        env.reset(seed=0)
