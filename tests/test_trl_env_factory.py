"""TRL's ``environment_factory`` path: the conversational dataset helper, and GRPO steps whose
completions call the env's tools through TRL's own tool loop.

The path of the example in docs/training.md (there ToolUse level 1 and a random tiny model,
which never calls a tool). Here the tiny model is first taught to open with a tool call, so
TRL's tool loop really runs; on the toy env, whose one tool ``act`` keeps the prompt short
(ToolUse's 15 tool schemas make a prompt of over 2,000 tokens, too long to teach on 2 cores
in a test). Needs the ``trl`` extra; nothing touches the Hub.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from budget_envs.integrations.common import make_env
from budget_envs.integrations.tiny_model import build_tiny_model, build_tiny_tokenizer, warm_start
from budget_envs.integrations.trl import (
    TOOL_INSTRUCTION,
    BudgetMixToolEnv,
    make_prompt_dataset,
    make_tool_dataset,
)

ENV_ID = "BudgetMix/ToolUse-v0"
TOY = "BudgetMixTest/Toy-v0"


@pytest.fixture(scope="module", autouse=True)
def _offline():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(threads)


def _tools(env: BudgetMixToolEnv) -> list:
    """The instance's tool methods, chosen as GRPOTrainer chooses them."""
    return [
        getattr(env, name)
        for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def test_make_tool_dataset_rows_are_conversational_and_name_tasks():
    from trl.data_utils import is_conversational

    factory = BudgetMixToolEnv.factory(ENV_ID, level=1, seed=0)
    data = make_tool_dataset(factory, 6, seed=3)
    assert len(data) == 6 and data.column_names == ["prompt", "task_id"]
    for row in data:
        assert is_conversational(row)
        assert row["prompt"] == [{"role": "user", "content": TOOL_INSTRUCTION}]
    env = make_env(ENV_ID, level=1)
    # The factory's env options pick the tasks: the same draws as from the env itself, and as
    # the rollout path's string prompts.
    assert data["task_id"] == make_tool_dataset(env, 6, seed=3)["task_id"]
    assert data["task_id"] == make_prompt_dataset(env, 6, seed=3)["task_id"]
    assert set(data["task_id"]) <= set(env.unwrapped.task_ids)
    # reset(**row) plays the row's task, as TRL calls it
    tool_env = factory()
    first = tool_env.reset(**data[0])
    assert tool_env.task_id == data[0]["task_id"] and first.strip()

    with_system = make_tool_dataset(env, 2, system_prompt="Be brief.", instruction="Go.")
    assert [m["role"] for m in with_system[0]["prompt"]] == ["system", "user"]
    assert with_system[0]["prompt"][1]["content"] == "Go."


def test_make_tool_dataset_argument_checks():
    env = make_env(ENV_ID, level=1)
    with pytest.raises(ValueError, match="0"):
        make_tool_dataset(env, 0)
    with pytest.raises(ValueError, match="instruction"):
        make_tool_dataset(env, 2, instruction=" ")
    with pytest.raises(TypeError, match="42"):
        make_tool_dataset(42, 2)
    with pytest.raises(TypeError, match="factory"):
        make_tool_dataset(BudgetMixToolEnv, 2)  # the base class names no env


def _tool_call_examples(factory, data):
    """A tokenizer trained on the rendered prompts, and (ids, loss mask) pairs that answer each
    prompt with the call ``act(command="look")``, rendered as TRL renders it."""
    env = factory()
    tools = _tools(env)
    assert [t.__name__ for t in tools] == ["act"]
    pairs = []
    for row in data:
        observation = env.reset(**row)
        call = {"type": "function", "function": {"name": "act", "arguments": {"command": "look"}}}
        conversation = [{"role": "user", "content": row["prompt"][0]["content"] + observation}]
        pairs.append((conversation, [*conversation, {"role": "assistant", "tool_calls": [call]}]))

    def render(tok, messages, prompt):
        return tok.apply_chat_template(
            messages, tools=tools, add_generation_prompt=prompt, tokenize=False
        )

    plain = build_tiny_tokenizer()
    tok = build_tiny_tokenizer([render(plain, full, False) for _, full in pairs])
    examples = []
    for prompt, full in pairs:
        head = tok(render(tok, prompt, True), add_special_tokens=False)["input_ids"]
        ids = tok(render(tok, full, False), add_special_tokens=False)["input_ids"]
        assert ids[: len(head)] == head
        examples.append((ids, [0] * len(head) + [1] * (len(ids) - len(head))))
    return tok, examples


def test_environment_factory_grpo_calls_the_tools(tmp_path):
    """GRPO with environment_factory, make_tool_dataset and a reward function that reads
    ``environments=``: the completions call a tool, TRL runs it on the env (a turn of the
    budget), and every rollout's env instance reaches the reward function."""
    from trl import GRPOConfig, GRPOTrainer

    factory = BudgetMixToolEnv.factory(TOY, budget=(2, 6), seed=0)
    data = make_tool_dataset(factory, 8, seed=0)
    tok, examples = _tool_call_examples(factory, data)
    model = build_tiny_model(tok, seed=0)
    losses = warm_start(model, examples, steps=120, batch_size=4, lr=4e-3, seed=0)
    assert losses[-1] < 0.05, losses[-1]

    seen = []

    def out_of_budget(environments, **kwargs):
        seen.append([(type(e), e.turns, e.task_id, e.stop_reason) for e in environments])
        return [-0.5 if e.stop_reason == "budget" else 0.0 for e in environments]

    trainer = GRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=out_of_budget,
        train_dataset=data,
        environment_factory=factory,
        args=GRPOConfig(
            output_dir=str(tmp_path),
            max_steps=2,
            per_device_train_batch_size=4,
            num_generations=2,
            max_completion_length=96,
            learning_rate=1e-3,
            bf16=False,
            use_cpu=True,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            seed=0,
        ),
    )
    trainer.train()
    assert trainer.state.global_step == 2
    assert len(seen) == 2 and all(len(batch) == 4 for batch in seen)
    rollouts = [r for batch in seen for r in batch]
    assert all(issubclass(kind, BudgetMixToolEnv) for kind, *_ in rollouts)
    assert {task for _, _, task, _ in rollouts} <= set(data["task_id"])
    played = [turns for _, turns, _, _ in rollouts]
    assert max(played) >= 1, played  # a tool call ran on the env
    calls = [
        h["tools/call_frequency"] for h in trainer.state.log_history if "tools/call_frequency" in h
    ]
    assert len(calls) == 2 and max(calls) > 0, calls
    # the env's own reward was added by TRL beside ours (logged under the factory class's name)
    logged = trainer.state.log_history[0]
    assert f"rewards/{factory.__name__}/mean" in logged and "rewards/out_of_budget/mean" in logged
