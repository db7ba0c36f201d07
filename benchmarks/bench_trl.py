"""TRL rollout speed: batched episodes against one episode at a time, same model and tasks.

Run: ``.venv/bin/python -m pytest benchmarks/bench_trl.py --benchmark-only -p no:cacheprovider``

Goal (issue 12): at batch 8 the batched rollout samples at least 4x the tokens per second of
playing the same 8 episodes one at a time (role ``baseline``). Both play ToolUse level 1 with
the offline tiny model under greedy decoding (``top_k=1``), so both play exactly the same
tokens; the time per sampled token is compared, and the ratio printed at the end is batched /
one-at-a-time (0.25 or less meets the goal).

The model is warm-started on oracle episodes (300 steps, with every core) until its replies
end on their own and episodes run several turns; the setup asserts both. A model that never
ends a reply plays every turn to ``max_turn_tokens``: it measures cut-off babble, and a model
whose episodes end after one turn measures a single batched call, not a rollout.

Both timed paths run with the same torch thread count: the core count, or
``BENCH_TORCH_THREADS``.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from budget_envs.integrations.tiny_model import (  # noqa: E402
    build_tiny_model,
    build_tiny_tokenizer,
    warm_start,
)
from budget_envs.integrations.trl import (  # noqa: E402
    BudgetMixRollout,
    make_env_like,
    oracle_examples,
    task_prompt,
)

ENV_ID = "BudgetMix/ToolUse-v0"
BATCH = 8
LIMIT = 384
WARM_STEPS = 300


@pytest.fixture(scope="module")
def setup():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(os.cpu_count() or 1)  # the warm start is setup, not measured
    rollout = BudgetMixRollout(
        ENV_ID, budget=6, env_kwargs={"level": 1}, max_turn_tokens=48, show_actions=False
    )
    env = make_env_like(rollout.env)
    corpus = []
    for seed in range(8):
        obs, _ = env.reset(seed=seed)
        corpus += [obs, *env.unwrapped.oracle_actions()]
    tok = build_tiny_tokenizer(corpus, vocab_size=2048)
    model = build_tiny_model(tok, seed=0)
    warm_start(model, oracle_examples(rollout, tok, n_episodes=48), steps=WARM_STEPS, lr=1e-2)
    torch.set_num_threads(int(os.environ.get("BENCH_TORCH_THREADS") or os.cpu_count() or 1))
    from transformers import GenerationConfig

    greedy = GenerationConfig(do_sample=True, top_k=1, temperature=1.0)
    tasks = list(rollout.env.unwrapped.task_ids[:BATCH])
    prompts = [task_prompt(t) for t in tasks]
    episodes = rollout.play(
        prompts, model, tok, max_completion_length=LIMIT, generation_config=greedy
    )
    turns = [len(ep.replies) for ep in episodes]
    assert sum(turns) >= 2 * BATCH, f"episodes too short to measure a rollout: {turns}"
    ended = [r[-1] == tok.eos_token_id for ep in episodes for r in ep.replies]
    assert sum(ended) >= 0.75 * len(ended), f"replies do not end: {sum(ended)}/{len(ended)}"
    return rollout, tok, model, greedy, prompts


def _play(setup, batched: bool) -> int:
    rollout, tok, model, greedy, prompts = setup
    groups = [prompts] if batched else [[p] for p in prompts]
    tokens = 0
    for group in groups:
        for ep in rollout.play(
            group, model, tok, max_completion_length=LIMIT, generation_config=greedy
        ):
            tokens += sum(len(r) for r in ep.replies)
    return tokens


@pytest.mark.parametrize("role", ["ours", "baseline"])
def test_rollout_tokens_per_second(benchmark, setup, role):
    batched = role == "ours"
    tokens = _play(setup, batched)  # warm-up; the same tokens every round (greedy)
    assert tokens > BATCH
    result = benchmark.pedantic(_play, args=(setup, batched), rounds=5, iterations=1)
    assert result == tokens
    benchmark.extra_info.update(
        {
            "compare": "trl_rollout_batch8_per_token",
            "role": role,
            "calls": tokens,
            "goal": "<= 0.25 (>= 4x tokens/s batched)",
            "tokens_per_second": tokens / benchmark.stats.stats.min,
        }
    )
