"""TRL integration: GRPO through rollout_func on a real BudgetMix env, and the tool adapter.

Runs on CPU with a tiny model built offline (HF_HUB_OFFLINE=1: nothing may touch the Hub).
Needs the ``trl`` extra (torch 2.13 CPU, trl, transformers) and ``textworld``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from budget_envs.integrations.tiny_model import (
    build_tiny_model,
    build_tiny_tokenizer,
    warm_start,
)
from budget_envs.integrations.trl import (
    STOP_REASONS,
    BudgetExhausted,
    BudgetMixRollout,
    BudgetMixToolEnv,
    EpisodeOver,
    env_reward,
    make_env_like,
    make_prompt_dataset,
    oracle_examples,
    task_prompt,
)

ROOT = Path(__file__).resolve().parents[1]
REAL_ID = "BudgetMix/TextWorld-v0"
REAL_KWARGS = {"level": 1, "seeds": 4}
TOY = "BudgetMixTest/Toy-v0"


@pytest.fixture(scope="module", autouse=True)
def _offline():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # small tensors: one thread is faster than two contending
        yield
        torch.set_num_threads(threads)


def _grpo_config(tmp_path, **overrides):
    from trl import GRPOConfig

    kwargs = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=256,
        max_steps=2,
        learning_rate=1e-3,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
    )
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)


@pytest.fixture(scope="module")
def real_setup():
    """A rollout on TextWorld level 1 and a tiny model warm-started on its oracle episodes."""
    rollout = BudgetMixRollout(
        REAL_ID,
        budget=(3, 12),
        visibility="remaining",
        process_reward=0.1,
        seed=0,
        env_kwargs=REAL_KWARGS,
        show_actions=False,
    )
    env = make_env_like(rollout.env)
    corpus = []
    for seed in range(4):
        obs, info = env.reset(seed=seed)
        corpus += [obs, *info["admissible_actions"], *env.unwrapped.oracle_actions()]
    tok = build_tiny_tokenizer(corpus)
    model = build_tiny_model(tok, seed=0)
    examples = oracle_examples(rollout, tok, n_episodes=8, seed=0)
    # Imitation until some episodes succeed: GRPO needs reward differences within a group.
    losses = warm_start(model, examples, steps=100, batch_size=8, lr=5e-3, seed=0)
    assert losses[-1] < losses[0] / 10
    return rollout, tok, model


def test_grpo_two_steps_on_real_env(real_setup, tmp_path):
    from trl import GRPOTrainer

    rollout, tok, model = real_setup
    calls = []

    def recording_rollout(prompts, trainer):
        out = rollout(prompts, trainer)
        calls.append((list(prompts), out))
        return out

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=env_reward,
        args=_grpo_config(tmp_path),
        train_dataset=make_prompt_dataset(rollout.env, 8, seed=0),
        processing_class=tok,
        rollout_func=recording_rollout,
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert changed, "no parameter changed in 2 GRPO steps"

    assert len(calls) >= 2
    budgets = set()
    saw_env_tokens = False
    for prompts, out in calls:
        n = len(prompts)
        for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward", "budget"):
            assert len(out[key]) == n, key
        for ids, mask, logps in zip(out["completion_ids"], out["env_mask"], out["logprobs"]):
            assert len(ids) == len(mask) == len(logps) <= 256
            assert set(mask) <= {0, 1} and mask[0] == 1
            saw_env_tokens |= 0 in mask
            assert all(lp <= 0.0 for lp in logps)
        # Repeats of one prompt play one task.
        assert len(set(prompts)) == n // 4
        budgets.update(out["budget"])
    assert saw_env_tokens, "env_mask never had a zero: no multi-turn episode"
    assert len(budgets) > 1, f"budgets did not vary across episodes: {budgets}"
    assert all(3 <= b <= 12 for b in budgets)


def test_env_tokens_render_observation_with_budget(real_setup):
    rollout, tok, model = real_setup
    prompts = [task_prompt("custom-L1-s1")] * 2
    episodes = rollout.play(prompts, model, tok, max_completion_length=512)
    assert len(episodes) == 2
    for ep in episodes:
        assert ep.budget >= 3
        env_part = [t for t, m in zip(ep.completion_ids, ep.env_mask) if m == 0]
        if ep.turns > 1:
            text = tok.decode(env_part)
            assert "<|im_start|>user" in text and "Turns left:" in text
        first = tok.decode(ep.prompt_ids)
        assert "<|im_start|>system" in first and "Turns left:" in first


def test_tool_env_budget_exhausted():
    factory = BudgetMixToolEnv.factory(TOY, budget=2, visibility="remaining", seed=0)
    env = factory()
    first = env.reset(task_id="toy-003")
    assert "Turns left: 2 of 2" in first and "Actions:" in first
    reply = env.act(command="look")
    assert "Turns left: 1 of 2" in reply
    with pytest.raises(BudgetExhausted, match="Budget exhausted"):
        env.act(command="look")
    with pytest.raises(BudgetExhausted, match="no turns are left"):
        env.act(command="look")
    assert env.get_reward() == 0.0

    # A won episode: further calls say the episode is over.
    env = BudgetMixToolEnv.factory(TOY, budget=50, seed=0)()
    env.reset(task_id="toy-003")
    while True:
        try:
            env.act(command=env.env.unwrapped.oracle_actions()[0])
        except BudgetExhausted:
            pytest.fail("budget of 50 ran out on the oracle path")
        if env.over:
            break
    assert env.over == "won" and env.get_reward() == 1.0
    with pytest.raises(EpisodeOver, match="won"):
        env.act(command="look")


def test_tool_env_exposes_tooluse_tools():
    """On the tool-use family every env tool is a typed method; the oracle plays through them."""
    import inspect
    import json

    from transformers.utils import get_json_schema

    factory = BudgetMixToolEnv.factory("BudgetMix/ToolUse-v0", budget=40, level=1, seed=0)
    names = {
        n
        for n, _ in inspect.getmembers(factory, predicate=inspect.isfunction)
        if not n.startswith("_")
    }
    assert {"find_customer", "list_orders", "submit", "reset", "get_reward"} <= names
    assert "act" not in names
    env = factory()
    schema = get_json_schema(env.list_orders)["function"]
    assert schema["parameters"]["required"] == ["customer_id"]
    env.reset()
    while env.over is None:
        call = json.loads(env.env.unwrapped.oracle_actions()[0])["tool_calls"][0]
        getattr(env, call["name"])(**call["arguments"])
    assert env.over == "won" and env.get_reward() == 1.0


def test_tool_env_in_grpo_trainer(tmp_path):
    """TRL accepts the adapter: it parses the tool schema and runs a step with it."""
    from transformers.utils import get_json_schema
    from trl import GRPOTrainer

    schema = get_json_schema(BudgetMixToolEnv.act)
    assert schema["function"]["name"] == "act"
    assert "command" in schema["function"]["parameters"]["properties"]
    tok = build_tiny_tokenizer(["go east"])
    model = build_tiny_model(tok)
    factory = BudgetMixToolEnv.factory(TOY, budget=(2, 4), seed=0)
    from datasets import Dataset

    data = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": "Solve the task with the act tool."}]] * 4,
            "task_id": ["toy-001", "toy-001", "toy-002", "toy-002"],
        }
    )
    trainer = GRPOTrainer(
        model=model,
        args=_grpo_config(
            tmp_path,
            num_generations=2,
            per_device_train_batch_size=2,
            max_completion_length=16,
            max_steps=1,
        ),
        train_dataset=data,
        processing_class=tok,
        environment_factory=factory,
    )
    trainer.train()
    assert trainer.state.global_step == 1


def test_argument_checks():
    with pytest.raises(ValueError, match="0"):
        BudgetMixRollout(TOY, max_turn_tokens=0)
    with pytest.raises(TypeError, match="42"):
        BudgetMixRollout(42)
    with pytest.raises(TypeError, match="env id"):
        BudgetMixToolEnv()
    with pytest.raises(ValueError, match="100"):
        build_tiny_tokenizer(vocab_size=100)


def test_imports_are_lazy():
    code = (
        "import sys, budget_envs, budget_envs.integrations.trl, budget_envs.integrations.rllib, "
        "budget_envs.integrations.tiny_model\n"
        "heavy = [m for m in ('torch', 'trl', 'transformers', 'ray') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


def test_missing_extra_names_pip_extra(monkeypatch):
    import gymnasium as gym

    from budget_envs.integrations import trl as trl_integration

    monkeypatch.setitem(sys.modules, "trl", None)
    with pytest.raises(gym.error.DependencyNotInstalled, match=r"budget-envs\[trl\]"):
        trl_integration._require()


def test_smoke_example_exits_zero(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "trl_grpo_budgetmix.py"),
            "--smoke",
            "--output-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "done in" in proc.stdout


# ---------------------------------------------------------------------- batched, token-exact
@pytest.fixture(scope="module")
def toy_policy():
    """A tiny model warm-started on the toy env's oracle, so episodes run several turns."""
    rollout = BudgetMixRollout(TOY, budget=(3, 8), seed=0, max_turn_tokens=8, show_actions=True)
    env = make_env_like(rollout.env)
    corpus = []
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        corpus += [obs, *info["admissible_actions"]]
    tok = build_tiny_tokenizer(corpus)
    model = build_tiny_model(tok, seed=0)
    examples = oracle_examples(rollout, tok, n_episodes=16, seed=0)
    warm_start(model, examples, steps=40, batch_size=8, lr=5e-3, seed=0)
    return tok, model


def _trainer(tok, model, tmp_path, rollout, **overrides):
    from trl import GRPOTrainer

    return GRPOTrainer(
        model=model,
        reward_funcs=env_reward,
        args=_grpo_config(tmp_path, **overrides),
        train_dataset=make_prompt_dataset(rollout.env, 8, seed=0),
        processing_class=tok,
        rollout_func=rollout,
    )


def _segments(ids, mask):
    """Consecutive runs of equal mask value: [(mask, ids), ...]."""
    out = []
    for t, m in zip(ids, mask):
        if out and out[-1][0] == m:
            out[-1][1].append(t)
        else:
            out.append((m, [t]))
    return out


def test_rollout_is_token_exact_against_the_generator(toy_policy, tmp_path, monkeypatch):
    tok, model = toy_policy
    rollout = BudgetMixRollout(TOY, budget=(3, 8), seed=1, max_turn_tokens=8)
    trainer = _trainer(tok, model, tmp_path, rollout)
    eos = set(trainer.eos_token_ids)  # every id that ends a reply (the template's end too)
    assert tok.eos_token_id in eos
    calls = []
    real_generate = model.generate

    def spy_generate(*args, **kwargs):
        out = real_generate(*args, **kwargs)
        width = kwargs["input_ids"].shape[1]
        calls.append(out.sequences[:, width:].tolist())
        return out

    encoded = []
    real_encode = tok.encode

    def spy_encode(text, *args, **kwargs):
        encoded.append(text)
        return real_encode(text, *args, **kwargs)

    monkeypatch.setattr(model, "generate", spy_generate)
    monkeypatch.setattr(tok, "encode", spy_encode)
    prompts = [task_prompt("toy-003")] * 4 + [task_prompt("toy-011")] * 4
    out = rollout(prompts, trainer)
    monkeypatch.undo()
    episodes = rollout.last_episodes
    assert len(episodes) == len(out["completion_ids"]) == 8
    turns = max(len(e.replies) for e in episodes)
    assert turns >= 2, "no multi-turn episode: the check below would be empty"
    # One generation call per turn for the whole batch.
    assert len(calls) == turns == rollout.last_generation_calls
    for c, sampled in enumerate(calls):
        live = [e for e in episodes if len(e.replies) > c]
        assert len(sampled) == len(live)
        for row, ep in zip(sampled, live):
            cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            reply = ep.replies[c]
            if c == len(ep.replies) - 1 and ep.stop_reason == "max_completion_length":
                # The reply that filled the completion is clipped to the room it had left.
                assert 0 < len(reply) <= cut and reply == row[: len(reply)]
            else:
                assert reply == row[:cut]
    saw_env = False
    for i, ep in enumerate(episodes):
        ids, mask, logps = out["completion_ids"][i], out["env_mask"][i], out["logprobs"][i]
        assert len(ids) == len(mask) == len(logps)
        segs = _segments(ids, mask)
        assert [seg for m, seg in segs if m == 1] == ep.replies  # sampled ids, in order
        assert segs[0][0] == 1 and segs[-1][0] == 1  # starts and ends with the agent's reply
        saw_env |= any(m == 0 for m, _ in segs)
        assert out["stop_reason"][i] in STOP_REASONS
        # Teacher forcing over the returned sequence reproduces the returned log-probs.
        full = torch.tensor([out["prompt_ids"][i] + ids])
        with torch.no_grad():
            logits = model(full).logits[0].float()
        p = len(out["prompt_ids"][i])
        lp = torch.log_softmax(logits[p - 1 : -1], dim=-1)
        forced = lp.gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
        sel = torch.tensor(mask, dtype=torch.bool)
        assert torch.allclose(forced[sel], torch.tensor(logps)[sel], atol=1e-4)
    assert saw_env
    # Every encode call holds one turn's new text: a prompt render or one env turn.
    assert encoded
    prompts_seen = [t for t in encoded if "<|im_start|>system" in t]
    assert len(prompts_seen) == len(episodes)
    for text in encoded:
        assert text.count("<|im_start|>user") == 1, text
        assert text.count("<|im_start|>assistant") == 1, text


def test_kept_kv_cache_plays_the_same_tokens_and_logprobs_as_a_full_prefill(toy_policy):
    from transformers import GenerationConfig

    tok, model = toy_policy
    prompts = [task_prompt("toy-003")] * 3 + [task_prompt("toy-011")] * 3 + [task_prompt("toy-020")]
    played = {}
    for reuse in (True, False):
        rollout = BudgetMixRollout(TOY, budget=(3, 8), seed=4, max_turn_tokens=8)
        rollout.reuse_cache = reuse
        greedy = GenerationConfig(do_sample=True, top_k=1, temperature=1.0)
        eps = rollout.play(prompts, model, tok, max_completion_length=96, generation_config=greedy)
        played[reuse] = (eps, rollout.last_generation_calls, rollout.last_cache_reuses)
    (cached, calls, reuses), (full, full_calls, full_reuses) = played[True], played[False]
    assert calls >= 2, "no second turn: the cache was never extended"
    assert reuses == calls - 1 and full_reuses == 0
    assert full_calls == calls
    for a, b in zip(cached, full, strict=True):
        assert a.completion_ids == b.completion_ids and a.env_mask == b.env_mask
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_top_k_1_gives_identical_rollouts_under_different_sampler_seeds(toy_policy, tmp_path):
    tok, model = toy_policy
    prompts = [task_prompt("toy-005")] * 4 + [task_prompt("toy-020")] * 4

    def run(trainer, step):
        rollout = BudgetMixRollout(TOY, budget=(3, 8), seed=2, max_turn_tokens=8)
        trainer.state.global_step = step  # the sampler seed is per (seed, rank, step)
        return rollout(prompts, trainer)["completion_ids"]

    greedy = _trainer(tok, model, tmp_path, BudgetMixRollout(TOY), top_k=1)
    assert run(greedy, 0) == run(greedy, 7)
    sampled = _trainer(tok, model, tmp_path, BudgetMixRollout(TOY))
    assert run(sampled, 0) != run(sampled, 7)  # the control: the seed does change sampling
    assert run(sampled, 3) == run(sampled, 3)  # and the same step replays exactly


def test_enable_thinking_false_puts_the_empty_think_block_in_the_prompt(toy_policy, tmp_path):
    tok, model = toy_policy
    think = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    for kwargs, expect in (({"enable_thinking": False}, True), (None, False)):
        rollout = BudgetMixRollout(TOY, budget=(3, 8), seed=0, max_turn_tokens=8)
        trainer = _trainer(tok, model, tmp_path, rollout, chat_template_kwargs=kwargs)
        out = rollout([task_prompt("toy-002")] * 4, trainer)
        for prompt_ids, ids, mask in zip(out["prompt_ids"], out["completion_ids"], out["env_mask"]):
            assert tok.decode(prompt_ids).endswith(think) is expect
            for m, seg in _segments(ids, mask):
                if m == 0:  # every env turn hands over to the assistant the same way
                    assert tok.decode(seg).endswith(think) is expect


def test_stop_reasons_name_the_limit_that_ended_the_episode(toy_policy):
    tok, model = toy_policy
    prompts = [task_prompt("toy-004")] * 4
    cases = (
        (dict(budget=1, max_turn_tokens=8), 512, "budget"),
        (dict(budget=20, max_turn_tokens=1), 512, "max_turn_tokens"),
        (dict(budget=20, max_turn_tokens=8), 12, "max_completion_length"),
    )
    for opts, limit, expected in cases:
        rollout = BudgetMixRollout(TOY, seed=0, **opts)
        episodes = rollout.play(prompts, model, tok, max_completion_length=limit)
        reasons = [e.stop_reason for e in episodes]
        assert expected in reasons, (opts, limit, reasons)
        assert set(reasons) <= set(STOP_REASONS)
        assert all(len(e.completion_ids) <= limit for e in episodes)
        for e in episodes:
            if e.stop_reason == "budget":
                assert e.turns == e.budget and not e.won


def test_task_and_budget_draws_are_seeded_per_episode(toy_policy):
    tok, model = toy_policy
    prompts = ["free prompt A"] * 4 + ["free prompt B"] * 4

    def draws(seed):
        rollout = BudgetMixRollout(TOY, budget=(1, 40), seed=seed, max_turn_tokens=2)
        eps = rollout.play(prompts, model, tok, max_completion_length=16)
        return [(e.task_id, e.budget) for e in eps]

    first = draws(0)
    assert first == draws(0)
    assert first != draws(1)
    # Repeats of one prompt share its task; budgets differ within the group.
    assert len({t for t, _ in first[:4]}) == 1 and len({t for t, _ in first[4:]}) == 1
    assert len({b for _, b in first[:4]}) >= 3
    rollout = BudgetMixRollout(TOY, budget=(1, 40), seed=0, max_turn_tokens=2, budget_per="group")
    eps = rollout.play(prompts, model, tok, max_completion_length=16)
    assert len({e.budget for e in eps[:4]}) == 1 and len({e.budget for e in eps[4:]}) == 1


def test_tool_env_instances_are_independent(tmp_path):
    """One GRPO batch of 2 rows x 4 generations on ToolUse: a shared task per row, budgets
    drawn per episode; 4 distinct rows (2 steps) give as many tasks."""
    from datasets import Dataset
    from trl import GRPOTrainer

    base = BudgetMixToolEnv.factory("BudgetMix/ToolUse-v0", budget=(1, 40), level=1, seed=0)
    resets = []

    def reset(self, **row):
        obs = base.reset(self, **row)
        resets.append((row["prompt"][0]["content"], self.task_id, self.budget, self.instance))
        return obs

    factory = type("RecordingToolEnv", (base,), {"reset": reset})
    tok = build_tiny_tokenizer(["find_customer list_orders submit"])
    model = build_tiny_model(tok)
    rows = [[{"role": "user", "content": f"Ticket number {i}. Work it."}] for i in range(4)]
    trainer = GRPOTrainer(
        model=model,
        args=_grpo_config(
            tmp_path,
            num_generations=4,
            per_device_train_batch_size=8,
            max_completion_length=8,
            max_steps=2,
        ),
        train_dataset=Dataset.from_dict({"prompt": rows}),
        processing_class=tok,
        environment_factory=factory,
    )
    trainer.train()
    by_row: dict[str, list] = {}
    for prompt, task, budget, _ in resets:
        by_row.setdefault(prompt, []).append((task, budget))
    assert len(by_row) == 4, by_row.keys()
    first_batch = [p for p, *_ in resets[:8]]
    assert len(set(first_batch)) == 2
    for prompt in set(first_batch):
        draws = by_row[prompt][:4]
        assert len({t for t, _ in draws}) == 1, draws
        assert len({b for _, b in draws}) >= 3, draws
    tasks = {draws[0][0] for draws in by_row.values()}
    assert len(tasks) >= 4, tasks
    assert len({inst for *_, inst in resets[:8]}) == 8  # eight pooled instances, own seeds
