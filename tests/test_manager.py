"""The verl-agent-shaped manager: one batch holds won, lost and budget ends; a group plays one
task; a seed fixes every transcript; hostile actions are turns; done envs stay done."""

from __future__ import annotations

import numpy as np
import pytest
from budget_envs.registry import registered_ids

from budget_envs.integrations.common import make_env
from budget_envs.integrations.manager import BudgetMixEnvManager

TOOLUSE = "BudgetMix/ToolUse-v0"
WRONG_SUBMIT = '{"tool_calls": [{"name": "submit", "arguments": {"answer": "999.99"}}]}'
HOSTILE = ["", "\x00\x00", '{"tool_calls": [{"name":', "x" * 100_000]


def _oracle(manager, i):
    best = manager.envs[i].unwrapped.oracle_actions()
    return best[0] if best else ""


def test_one_batch_holds_won_lost_and_budget_ends_and_done_envs_stay_done():
    m = BudgetMixEnvManager(TOOLUSE, 3, budget=6, seed=0)
    try:
        obs, infos = m.reset([{"task_id": "L1-00000", "seed": 1}] * 3)
        assert obs["image"] is None and len(obs["text"]) == len(obs["anchor"]) == 3
        dones = np.zeros(3, bool)
        seen = []
        for turn in range(1, 7):
            actions = [_oracle(m, 0), WRONG_SUBMIT, HOSTILE[(turn - 1) % len(HOSTILE)]]
            obs, rewards, dones, infos = m.step(actions)
            assert rewards.dtype == np.float32 and dones.dtype == bool
            seen.append((dones.copy(), rewards.copy(), [dict(i) for i in infos]))
            if dones.all():
                break
        assert dones.all()
        assert [i["stop_reason"] for i in infos] == ["won", "lost", "budget"]
        assert [i["won"] for i in infos] == [True, False, False]
        # env 1 lost on its first turn; env 0 won on the oracle's last; env 2 ran out at T=6
        assert seen[0][0].tolist() == [False, True, False] and seen[0][2][1]["is_action_valid"]
        assert all(not s[2][2]["is_action_valid"] for s in seen)  # every hostile action invalid
        assert len(seen) == 6 and infos[2]["turn"] == 6 and infos[2]["budget"]["remaining"] == 0
        won_at = next(k for k, s in enumerate(seen) if s[0][0])
        assert seen[won_at][1][0] > 0
        # After its end an env ignores actions until reset: nothing is played, reward 0.
        for k in range(1, len(seen)):
            assert seen[k][2][1]["ignored"] and seen[k][1][1] == 0.0 and seen[k][0][1]
            assert seen[k][2][1]["turn"] == 1
        before = m.envs[0].unwrapped.turn
        obs2, rewards, dones, infos2 = m.step([_oracle(m, 0) or "x", "y", "z"])
        assert dones.all() and not rewards.any() and m.envs[0].unwrapped.turn == before
        assert all(i["ignored"] for i in infos2) and obs2["anchor"] == obs["anchor"]
        obs, infos = m.reset()
        assert not any(i["ignored"] for i in infos) and all(i["turn"] == 0 for i in infos)
        _, _, dones, _ = m.step(["", "", ""])
        assert not dones.any()
    finally:
        m.close()


def test_groups_share_task_seed_and_budget():
    m = BudgetMixEnvManager(TOOLUSE, 6, group_n=3, budget=(3, 30), seed=3)
    try:
        tasks = set()
        for _ in range(4):
            obs, infos = m.reset()
            for g in range(2):
                members = infos[3 * g : 3 * g + 3]
                assert [i["group"] for i in members] == [g] * 3
                assert len({(i["task_id"], i["budget"]["limit"]) for i in members}) == 1
                assert len(set(obs["anchor"][3 * g : 3 * g + 3])) == 1
                tasks.add(members[0]["task_id"])
        assert len(tasks) == 8  # fresh tasks per group and per reset
        assert m.num_groups == 2
    finally:
        m.close()


def _transcript(seed, env_id=TOOLUSE):
    m = BudgetMixEnvManager(env_id, 4, group_n=2, budget=(4, 9), seed=seed, faults="slip")
    rng = np.random.default_rng(0)
    try:
        obs, infos = m.reset()
        lines = [obs["text"], [i["task_id"] for i in infos]]
        for _ in range(10):
            actions = [
                i["candidate_actions"][int(rng.integers(len(i["candidate_actions"])))]
                if i["candidate_actions"]
                else ""
                for i in infos
            ]
            obs, rewards, dones, infos = m.step(actions)
            lines.append((obs, rewards.tolist(), dones.tolist(), infos))
        return lines
    finally:
        m.close()


def test_the_same_seed_gives_the_same_transcripts_and_another_seed_others():
    a, b = _transcript(5), _transcript(5)
    assert a == b
    assert _transcript(6)[1] != a[1]


@pytest.mark.parametrize("env_id", registered_ids(), ids=str)
def test_every_id_plays_as_in_process(env_id):
    m = BudgetMixEnvManager(env_id, 2, group_n=2, budget=5, visibility="remaining", seed=1)
    ref = make_env(env_id, budget=5, visibility="remaining")
    try:
        obs, infos = m.reset([{"seed": 9}])
        ref_obs, ref_info = ref.reset(seed=9, options={"task_id": infos[0]["task_id"]})
        assert obs["anchor"] == [ref_obs, ref_obs]
        for turn in range(5):
            action = ref_info["candidate_actions"][0] if turn % 2 else "\x00"
            obs, rewards, dones, infos = m.step([action, action])
            ref_obs, reward, terminated, truncated, ref_info = ref.step(action)
            assert obs["anchor"] == [ref_obs, ref_obs] and rewards.tolist() == [reward] * 2
            assert dones.tolist() == [terminated or truncated] * 2
            assert infos[0]["state_hash"] == ref_info["state_hash"]
            assert infos[0]["is_action_valid"] == (turn % 2 == 1)  # NUL: invalid everywhere
            if dones.all():
                break
        assert dones.all() and infos[0]["stop_reason"] in ("won", "lost", "budget")
    finally:
        m.close()
        ref.close()


def test_text_holds_prompt_goal_history_and_budget_line_anchor_only_the_observation():
    m = BudgetMixEnvManager(
        TOOLUSE, 1, budget=10, visibility="remaining", history_length=1, show_actions=True
    )
    try:
        obs, infos = m.reset()
        first = obs["anchor"][0]
        assert first.endswith("Turns left: 10 of 10") and first in obs["text"][0]
        assert "Goal: " in obs["text"][0] and "Actions you can send: " in obs["text"][0]
        call = infos[0]["candidate_actions"][0]
        for reply in ["", "<think>hm</think>\n" + call]:
            obs, _, _, infos = m.step([reply])
        text, anchor = obs["text"][0], obs["anchor"][0]
        assert anchor.endswith("Turns left: 8 of 10") and "[Turn" not in anchor
        assert "[Turn 2]" in text and "[Turn 1]" not in text  # history_length=1
        assert "You have taken 2 turn(s)" in text and text.index(anchor) > text.index("[Turn 2]")
        assert infos[0]["action"] == call  # the reply's reasoning left out
        assert infos[0]["is_action_valid"]
    finally:
        m.close()


def test_argument_and_call_checks_raise_and_quote_the_value():
    with pytest.raises(ValueError, match="n=5, group_n=2"):
        BudgetMixEnvManager(TOOLUSE, 5, group_n=2)
    with pytest.raises(ValueError, match="0"):
        BudgetMixEnvManager(TOOLUSE, 0)
    with pytest.raises(ValueError, match="needs a budget"):
        BudgetMixEnvManager(TOOLUSE, 1, budget=None)
    with pytest.raises(ValueError, match="-1"):
        BudgetMixEnvManager(TOOLUSE, 1, history_length=-1)
    m = BudgetMixEnvManager(TOOLUSE, 2, group_n=2)
    try:
        with pytest.raises(RuntimeError, match="reset"):
            m.step(["", ""])
        m.reset()
        with pytest.raises(ValueError, match="2 actions"):
            m.step([""])
        with pytest.raises(ValueError, match="one per group"):
            m.reset([{}, {}])
    finally:
        m.close()
