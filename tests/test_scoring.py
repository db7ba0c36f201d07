"""Acting by scoring the offered actions (``actions="score"``): the scores are the model's own
log-probabilities, every action played is one the env offered, and the chosen reply trains
(and replays) like a written one, in the GRPO rollout, the policy folder and the ``lm`` agent.

The tiny offline model throughout (HF_HUB_OFFLINE=1); the ``lm`` agent's test uses a folder
``budgetmix train --trainer trl`` wrote.
"""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import torch
from contract_helpers import QUICK_KWARGS, family_ids

import budget_envs  # noqa: F401
from budget_envs.cli import main
from budget_envs.integrations.tiny_model import build_tiny_model, build_tiny_tokenizer
from budget_envs.integrations.trl import BudgetMixRollout, task_prompt
from budget_envs.integrations.trl.scoring import candidate_ids, choose, score_candidates

FAMILY_IDS = family_ids()  # every registered family is played


@pytest.fixture(scope="module", autouse=True)
def _offline():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
        yield


@pytest.fixture(scope="module")
def tiny():
    tok = build_tiny_tokenizer(['{"tool_calls": [{"name": "get_order"}]} go north take key'])
    return tok, build_tiny_model(tok, seed=0).eval()


def _full_logps(model, context, reply):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(context) + list(reply)])).logits[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return [float(logp[len(context) - 1 + j, t]) for j, t in enumerate(reply)]


def test_scores_are_the_models_log_probabilities_of_each_reply(tiny):
    tok, model = tiny
    context = tok.encode("You are in a hall. Exits: north.")
    actions = ["go north", "take key", "go north", "", "x", '{"tool_calls": []}'] + [
        f"open door {i}" for i in range(9)
    ]
    texts, cands = candidate_ids(tok, actions, tok.eos_token_id)
    assert texts == [a for i, a in enumerate(actions) if a and a not in actions[:i]]
    assert all(c[-1] == tok.eos_token_id for c in cands)
    scores = score_candidates(model, context, cands, chunk=4)  # ragged rows, several chunks
    assert len(scores) == len(cands)
    for cand, got in zip(cands, scores):
        assert got == pytest.approx(_full_logps(model, context, cand), abs=1e-4)
    # A kept cache of the context gives the same scores.
    with torch.no_grad():
        out = model(input_ids=torch.tensor([context]), use_cache=True)
    cache = out.cache if hasattr(out, "cache") else out.past_key_values
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    again = score_candidates(model, context, cands, kv=kv, last_logits=out.logits[0, -1])
    flat = [x for row in scores for x in row]
    assert [x for row in again for x in row] == pytest.approx(flat, abs=1e-4)
    # Room keeps only the replies that fit.
    _, short = candidate_ids(tok, actions, tok.eos_token_id, room=3)
    assert short and all(len(c) <= 3 for c in short) and len(short) < len(cands)


def test_choice_is_the_softmax_of_the_scores_and_greedy_at_zero():
    scores = [[-3.0], [-1.0, -0.5], [-1.5], [-1.5]]
    assert choose(scores, 0.0) == 1  # the highest total, first on ties
    draws = [choose(scores, 1.0, torch.Generator().manual_seed(s)) for s in range(4000)]
    probs = torch.softmax(torch.tensor([-3.0, -1.5, -1.5, -1.5]), 0)
    for i, p in enumerate(probs):
        assert abs(draws.count(i) / len(draws) - float(p)) < 0.03
    again = [choose(scores, 1.0, torch.Generator().manual_seed(s)) for s in range(50)]
    assert again == draws[:50]  # seeded


def test_score_mean_averages_per_token_so_length_does_not_decide():
    # A one-token reply at -1.0 against a three-token reply at -0.5 a token: summed, the short
    # one wins (-1.0 > -1.5); averaged, the long one does (-0.5 > -1.0).
    scores = [[-1.0], [-0.5, -0.5, -0.5], [-2.0, -0.1]]
    assert choose(scores, 0.0) == 0
    assert choose(scores, 0.0, mode="score-mean") == 1
    draws = [
        choose(scores, 1.0, torch.Generator().manual_seed(s), mode="score-mean")
        for s in range(4000)
    ]
    probs = torch.softmax(torch.tensor([-1.0, -0.5, -1.05]), 0)
    for i, p in enumerate(probs):
        assert abs(draws.count(i) / len(draws) - float(p)) < 0.03
    with pytest.raises(ValueError, match="actions must be one of"):
        choose(scores, 0.0, mode="mean")


@pytest.mark.parametrize(("family", "env_id"), FAMILY_IDS, ids=[f for f, _ in FAMILY_IDS])
def test_rollout_plays_only_offered_actions_and_trains_on_their_scores(tiny, family, env_id):
    tok, model = tiny
    kwargs = QUICK_KWARGS.get(family, {})
    rollout = BudgetMixRollout(env_id, budget=3, env_kwargs=kwargs, actions="score", seed=0)
    task_ids = list(rollout.env.unwrapped.task_ids[:2])
    prompts = [task_prompt(t) for t in task_ids for _ in range(2)]
    episodes = rollout.play(prompts, model, tok, max_completion_length=4096, sampler_seed=3)
    replay = gym.make(env_id, budget=3, **kwargs)
    played = 0
    for ep in episodes:
        assert ep.stop_reason in ("won", "lost", "budget"), ep.stop_reason
        obs, info = replay.reset(seed=ep.seed, options={"task_id": ep.task_id})
        invalid = 0
        for action, reply in zip(ep.actions, ep.replies):
            assert action in info["candidate_actions"], action  # offered this turn
            assert reply == tok.encode(action, add_special_tokens=False) + [tok.eos_token_id]
            obs, _, term, trunc, info = replay.step(action)
            invalid += int(bool(info.get("invalid_action")))
            played += 1
        assert ep.invalid == invalid  # the metrics' invalid_share counts the env's answers
        # The logprobs of the agent's ids are the model's, as GRPO reads them.
        mask = ep.env_mask
        ctx = list(ep.prompt_ids)
        for j, (tid, m) in enumerate(zip(ep.completion_ids, mask)):
            if m and j in (0, len(mask) - 1):
                want = _full_logps(model, ctx, [tid])[0]
                assert ep.logprobs[j] == pytest.approx(want, abs=1e-3)
            ctx.append(tid)
    replay.close()
    assert played >= len(episodes)
    again = BudgetMixRollout(env_id, budget=3, env_kwargs=kwargs, actions="score", seed=0)
    repeat = again.play(prompts, model, tok, max_completion_length=4096, sampler_seed=3)
    assert [e.actions for e in repeat] == [e.actions for e in episodes]


def test_a_scoring_folder_plays_offered_actions_as_policy_and_as_lm(tmp_path):
    out = tmp_path / "policy"
    argv = ["train", "BudgetMix/ToolUse-v0", "--trainer", "trl", "--budget", "4"]
    argv += ["--env-kwargs", '{"level": 1}', "--iterations", "1", "--batch-size", "4"]
    argv += ["--out", str(out), "--trl-kwargs", '{"actions": "score", "warm_start_steps": 5}']
    assert main(argv) == 0
    assert json.loads((out / "budgetmix_policy.json").read_text())["actions"] == "score"
    specs = [f"p=policy:{out}", f"l=lm:model={out},temperature=0.7"]
    for i, spec in enumerate(specs):
        run = tmp_path / f"eval{i}"
        argv = ["eval", "BudgetMix/ToolUse-v0", "--agent", spec, "--tasks", "2", "--samples", "2"]
        argv += ["--budgets", "4", "--env-kwargs", '{"level": 1}', "--out", str(run), "--quiet"]
        assert main(argv) == 0
        rows = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
        rows = [r for r in rows if r.get("record", "episode") == "episode"]
        assert len(rows) == 4 and not any(r["error"] for r in rows)
        env = gym.make("BudgetMix/ToolUse-v0", budget=4, level=1)
        for r in rows:
            obs, info = env.reset(seed=r["seed"], options={"task_id": r["task_id"]})
            for action in r["actions"]:
                assert action in info["candidate_actions"], (spec, action)
                obs, _, term, trunc, info = env.step(action)
        env.close()
