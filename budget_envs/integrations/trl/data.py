"""Datasets for the two ways in, and oracle episodes for a warm start.

* :func:`make_prompt_dataset`: plain prompts that name tasks, for the rollout
  (:class:`~budget_envs.integrations.trl.rollout.BudgetMixRollout`);
* :func:`make_tool_dataset`: conversational prompts for ``environment_factory``
  (:class:`~budget_envs.integrations.trl.tool_env.BudgetMixToolEnv`);
* :func:`oracle_examples`: oracle episodes as token ids and loss masks, rendered exactly as the
  rollout renders its episodes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from budget_envs.integrations.common import make_env, make_env_like
from budget_envs.integrations.trl.base import _require
from budget_envs.integrations.trl.dialogue import _Dialogue, _user_text, task_prompt
from budget_envs.integrations.trl.tool_env import BudgetMixToolEnv

if TYPE_CHECKING:
    from budget_envs.integrations.trl.rollout import BudgetMixRollout


def _draw_tasks(env: gym.Env, n: int, seed: int, task_ids: Sequence[str] | None) -> list[str]:
    """``n`` task ids drawn with ``seed`` from ``task_ids`` (default: every task of ``env``)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    ids = list(env.unwrapped.task_ids if task_ids is None else task_ids)
    if not ids:
        raise ValueError(f"task_ids must name at least one task, got {task_ids!r}")
    rng = np.random.default_rng(seed)
    return [ids[int(i)] for i in rng.integers(len(ids), size=n)]


def make_prompt_dataset(
    env: gym.Env, n: int, seed: int = 0, task_ids: Sequence[str] | None = None
) -> Any:
    """A ``datasets.Dataset`` of ``n`` prompts, each naming a task drawn with ``seed``.

    Tasks are drawn from ``task_ids`` (default: every task of the env). GRPO repeats each prompt
    ``num_generations`` times; every repeat plays the same task (so the group's advantages
    compare like with like) under its own budget draw. The prompts are plain text, for
    :class:`BudgetMixRollout`; the ``environment_factory`` path needs conversational prompts:
    :func:`make_tool_dataset`.
    """
    from datasets import Dataset

    picks = _draw_tasks(env, n, seed, task_ids)
    return Dataset.from_dict({"prompt": [task_prompt(t) for t in picks], "task_id": picks})


#: The user message of :func:`make_tool_dataset`; the env's first observation follows it.
TOOL_INSTRUCTION = (
    "Solve the task below by calling the tools. Each tool call is one turn of a limited turn "
    "budget; call one tool at a time and stop when the task is done."
)


def make_tool_dataset(
    env: gym.Env | type[BudgetMixToolEnv],
    n: int,
    seed: int = 0,
    task_ids: Sequence[str] | None = None,
    *,
    instruction: str = TOOL_INSTRUCTION,
    system_prompt: str | None = None,
) -> Any:
    """A conversational ``datasets.Dataset`` of ``n`` rows for ``environment_factory``.

    TRL's tool loop takes conversational prompts (a list of messages): each row's ``prompt`` is
    ``[{"role": "user", "content": instruction}]`` (after a system message when
    ``system_prompt`` is given), and its ``task_id`` column names the task that
    :meth:`BudgetMixToolEnv.reset` plays; TRL appends the first observation that ``reset``
    returns to the user message, and renders the tools' schema with the chat template.

    Args:
        env: the env the tasks come from, or the class that :meth:`BudgetMixToolEnv.factory`
            returned (its env id and options are used).
        n, seed, task_ids: as in :func:`make_prompt_dataset` (tasks drawn with ``seed`` from
            ``task_ids``, default every task).
        instruction: the user message.
        system_prompt: a system message, or None for none (the chat template then renders the
            tools in its own system block).

    Example:
        >>> from budget_envs.integrations.trl import BudgetMixToolEnv, make_tool_dataset
        >>> factory = BudgetMixToolEnv.factory("BudgetMix/ToolUse-v0", level=1)
        >>> row = make_tool_dataset(factory, 4)[0]
        >>> [m["role"] for m in row["prompt"]], row["task_id"].startswith("L1-")
        (['user'], True)
    """
    from datasets import Dataset

    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError(f"instruction must be a non-empty str, got {instruction!r}")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise TypeError(f"system_prompt must be a str or None, got {system_prompt!r}")
    if isinstance(env, type) and issubclass(env, BudgetMixToolEnv):
        if not env.env_id:
            raise TypeError("env must be a class made by BudgetMixToolEnv.factory(env_id, ...)")
        source = make_env(env.env_id, **env.env_options)
        try:
            picks = _draw_tasks(source, n, seed, task_ids)
        finally:
            source.close()
    elif isinstance(env, gym.Env):
        picks = _draw_tasks(env, n, seed, task_ids)
    else:
        raise TypeError(
            f"env must be a gymnasium.Env or a BudgetMixToolEnv.factory class, got {env!r}"
        )
    head = [] if system_prompt is None else [{"role": "system", "content": system_prompt}]
    prompt = [*head, {"role": "user", "content": instruction}]
    return Dataset.from_dict({"prompt": [list(prompt) for _ in picks], "task_id": picks})


def oracle_examples(
    rollout: BudgetMixRollout,
    tokenizer: Any,
    n_episodes: int = 16,
    seed: int = 0,
    *,
    task_ids: Sequence[str] | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> list[tuple[list[int], list[int]]]:
    """Token ids and loss masks of oracle episodes, rendered exactly as the rollout renders them.

    For a warm start (:func:`budget_envs.integrations.tiny_model.warm_start`): the mask is 1 on
    the agent's tokens only. Tasks are drawn from ``task_ids`` (default: every task).
    """
    _require()
    dialogue = _Dialogue(tokenizer, rollout.system_prompt, chat_template_kwargs)
    env = make_env_like(rollout.env)
    ids = list(env.unwrapped.task_ids if task_ids is None else task_ids)
    rng = np.random.default_rng(seed)
    out = []
    eos = tokenizer.eos_token_id
    for k in range(n_episodes):
        obs, info = env.reset(seed=seed + k, options={"task_id": ids[int(rng.integers(len(ids)))]})
        tokens = dialogue.prompt_ids(_user_text(obs, info, rollout.show_actions))
        mask = [0] * len(tokens)
        for action, text, over in _oracle_turns(env, rollout.show_actions, 200):
            reply = tokenizer.encode(action, add_special_tokens=False) + [eos]
            tokens += reply
            mask += [1] * len(reply)
            if over:
                break
            env_ids = dialogue.env_ids(text, True)
            tokens += env_ids
            mask += [0] * len(env_ids)
        out.append((tokens, mask))
    return out


def _oracle_turns(
    env: gym.Env, show_actions: bool, max_turns: int
) -> Iterator[tuple[str, str, bool]]:
    """The oracle plays ``env`` from where it is, for at most ``max_turns`` turns or until it has
    no action: per turn, the action, the user text that follows it and whether the episode ended
    (the last turn)."""
    base = env.unwrapped
    for _ in range(max_turns):
        best = base.oracle_actions()
        if not best:
            return
        obs, _, terminated, truncated, info = env.step(best[0])
        yield best[0], _user_text(obs, info, show_actions), bool(terminated or truncated)
        if terminated or truncated:
            return
