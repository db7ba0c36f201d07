"""TRL integration: BudgetMix episodes for ``GRPOTrainer`` (the optional ``trl`` extra).

Two ways in, both with the turn budget drawn per episode by the :class:`BudgetWrapper`:

* :class:`BudgetMixRollout` is a ``rollout_func``: it plays one multi-turn episode per prompt,
  all the episodes of a batch together (one generation call per turn for every live episode),
  and returns the sampled token ids with the environment's tokenized turns appended
  (``env_mask`` 0 on those, so only the agent's tokens carry the loss), the sampling
  log-probabilities of exactly those ids, the episode's env reward (``env_reward``) and why it
  ended (``stop_reason``, one of :data:`STOP_REASONS`).
* :class:`BudgetMixToolEnv` is an ``environment_factory`` class: TRL runs the generation loop
  and calls its tools (``act(command)`` for text envs; one typed method per tool for the tool-use
  family); at truncation a tool raises :class:`BudgetExhausted`, which TRL hands back to the
  model as a tool error.

A turn is one env step everywhere: one reply of the rollout, one tool call of the tool adapter,
one ``act`` of an eval agent. In the tool-use family one turn is one tool call (the env rejects a
message with several calls as an invalid turn), in training and in evaluation alike.

Training end to end (warm start, GRPO, checkpoint, evaluation) is :func:`train`
(:mod:`budget_envs.integrations.trl_train`); a checkpoint plays in the eval harness as
:class:`~budget_envs.integrations.trl_train.PolicyAgent`.

``import budget_envs`` never imports torch or trl: they load inside the functions here.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from budget_envs._util import require, tool_call_action
from budget_envs.errors import BudgetExhausted, EpisodeOver
from budget_envs.integrations.common import DEFAULT_BUDGET, make_env, make_env_like

__all__ = [
    "BudgetExhausted",
    "BudgetMixRollout",
    "BudgetMixToolEnv",
    "EpisodeOver",
    "HFTurnGenerator",
    "RolloutEpisode",
    "STOP_REASONS",
    "SYSTEM_PROMPT",
    "TOOL_INSTRUCTION",
    "VLLMTurnGenerator",
    "action_from_reply",
    "env_reward",
    "make_env",
    "make_env_like",
    "load_policy",
    "make_prompt_dataset",
    "make_tool_dataset",
    "oracle_examples",
    "task_prompt",
    "train",
]

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are an agent in a text environment. Each turn, reply with exactly one action and "
    "nothing else."
)
#: Why an episode ended: the env's words (``won``, ``lost``, ``budget``: the turn budget ran
#: out) and the trainer's (``max_completion_length``: the next turn would not fit in the token
#: limit of the whole episode; ``max_turn_tokens``: a reply did not end within its token cap).
STOP_REASONS = ("won", "lost", "budget", "max_completion_length", "max_turn_tokens")
_TASK_TAG = re.compile(r"\[task_id=([^\]\s]+)\]")
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_MARK_A, _MARK_U = "\x1fASSISTANT\x1f", "\x1fUSER\x1f"


def _require() -> None:
    require("torch", "trl", extra="trl", what="the TRL integration")


def _seed(*parts: int) -> int:
    """One 32-bit seed from integer parts (the same in every process)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def task_prompt(task_id: str) -> str:
    """The dataset prompt that names a task; :class:`BudgetMixRollout` plays that task."""
    return f"Play the BudgetMix task [task_id={task_id}]."


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


def env_reward(
    completions: Sequence[Any],
    env_reward: Sequence[float],
    stop_reason: Sequence[str] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """GRPO reward function: the episode's env reward that the rollout returned.

    It also logs the share of each stop reason in the batch (``stop_reason/<word>``) through
    TRL's ``log_metric``, so the training log says which limit ended the episodes.
    """
    if stop_reason is not None and log_metric is not None and len(stop_reason):
        for word in STOP_REASONS:
            log_metric(
                f"stop_reason/{word}", sum(s == word for s in stop_reason) / len(stop_reason)
            )
    return [float(r) for r in env_reward]


def _user_text(obs: str, info: dict[str, Any], show_actions: bool) -> str:
    text = obs
    if show_actions and info.get("admissible_actions"):
        text += "\nActions: " + ", ".join(info["admissible_actions"][:20])
    return text


def action_from_reply(text: str) -> str:
    """The action in a decoded reply: reasoning (``<think>...</think>``) removed, then the first
    non-empty line, or the whole rest when it is JSON (a tool call may span lines).

    An unclosed ``<think>`` leaves no action (an empty, hence invalid, turn).

    >>> action_from_reply("<think>the key is east</think>\\ngo east\\nthanks")
    'go east'
    >>> action_from_reply('{"tool_calls": [\\n {"name": "submit"}]}')
    '{"tool_calls": [\\n {"name": "submit"}]}'
    >>> action_from_reply("<think>still thinking")
    ''
    """
    text = _THINK.sub("", text)
    if "<think>" in text:
        return ""
    text = text.strip()
    if text[:1] in "{[":
        return text
    return text.splitlines()[0].strip() if text else ""


@dataclass
class RolloutEpisode:
    """One played episode: token ids, the loss mask, log-probs and the outcome."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    won: bool = False
    turns: int = 0
    budget: int = 0
    task_id: str = ""
    seed: int = 0
    stop_reason: str = ""
    actions: list[str] = field(default_factory=list)
    #: The sampled ids of every reply, in order (``completion_ids`` is these plus env turns).
    replies: list[list[int]] = field(default_factory=list)


class _Dialogue:
    """Renders a dialogue with any chat template, turn by turn, as token ids.

    The text between an assistant reply and the next generation (end of turn, user header,
    observation, assistant header, and whatever the template adds there, such as Qwen3's empty
    think block with ``enable_thinking=False``) is read off the template once, by rendering a
    probe dialogue. Only new text is ever encoded: the first user turn for the prompt, then each
    new observation with its markup; earlier turns are never re-encoded.
    """

    def __init__(
        self,
        tokenizer: Any,
        system_prompt: str | None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.tok = tokenizer
        self.system_prompt = system_prompt
        self.kwargs = dict(chat_template_kwargs or {})
        probe = self._messages("U0") + [
            {"role": "assistant", "content": _MARK_A},
            {"role": "user", "content": _MARK_U},
        ]
        text = self._render(probe)
        after = text[text.index(_MARK_A) + len(_MARK_A) :]
        self.before_obs, _, self.after_obs = after.partition(_MARK_U)
        eos = tokenizer.eos_token or ""
        ends_with_eos = bool(eos) and self.before_obs.startswith(eos)
        self.before_obs_no_eos = self.before_obs[len(eos) :] if ends_with_eos else self.before_obs

    def _render(self, messages: list[dict[str, str]]) -> str:
        return self.tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **self.kwargs
        )

    def _messages(self, first: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return msgs + [{"role": "user", "content": first}]

    def prompt_ids(self, first: str) -> list[int]:
        return self.tok.encode(self._render(self._messages(first)), add_special_tokens=False)

    def env_ids(self, obs: str, reply_ended: bool) -> list[int]:
        head = self.before_obs_no_eos if reply_ended else self.before_obs
        return self.tok.encode(head + obs + self.after_obs, add_special_tokens=False)


class _TokenEpisode:
    """The token state of one episode, shared by the batched rollout and the eval agent.

    ``take_reply`` appends the sampled ids (mask 1) and returns the action, or None when the
    episode ends there (the reply did not end within its cap, or filled the token limit);
    ``take_observation`` appends the env's tokens (mask 0), or ends the episode when the next
    turn would not fit.
    """

    def __init__(
        self,
        dialogue: _Dialogue,
        first_user_text: str,
        limit: int,
        max_turn_tokens: int,
        eos_ids: Sequence[int],
    ) -> None:
        self.dialogue = dialogue
        self.limit = int(limit)
        self.max_turn_tokens = int(max_turn_tokens)
        self.eos_ids = set(int(e) for e in eos_ids)
        self.ep = RolloutEpisode(prompt_ids=dialogue.prompt_ids(first_user_text))
        self.over = False

    def context(self) -> list[int]:
        return self.ep.prompt_ids + self.ep.completion_ids

    def room(self) -> int:
        return self.limit - len(self.ep.completion_ids)

    def take_reply(self, ids: Sequence[int], logps: Sequence[float]) -> str | None:
        ep, room = self.ep, self.room()
        ids, logps = list(ids)[:room], [float(x) for x in list(logps)[:room]]
        ep.completion_ids += ids
        ep.env_mask += [1] * len(ids)
        ep.logprobs += logps
        ep.replies.append(ids)
        if not ids or ids[-1] not in self.eos_ids:
            self.over = True
            ep.stop_reason = "max_completion_length" if len(ids) >= room else "max_turn_tokens"
            return None
        text = self.dialogue.tok.decode(ids, skip_special_tokens=True)
        return action_from_reply(text)

    def take_observation(self, user_text: str) -> bool:
        ep = self.ep
        env_ids = self.dialogue.env_ids(user_text, reply_ended=True)
        if len(ep.completion_ids) + len(env_ids) + 1 > self.limit:
            self.over = True
            ep.stop_reason = "max_completion_length"
            return False
        ep.completion_ids += env_ids
        ep.env_mask += [0] * len(env_ids)
        ep.logprobs += [0.0] * len(env_ids)
        return True


# ---------------------------------------------------------------------- generation back ends
class HFTurnGenerator:
    """One ``generate`` call of a transformers model for a batch of left-padded contexts.

    ``generation_config`` carries the sampling settings (GRPOConfig's temperature, top_p, top_k,
    min_p, repetition_penalty and generation_kwargs when built by the trainer); only
    ``max_new_tokens`` changes per call. Log-probabilities are those of the sampled ids under
    ``log_softmax(logits / temperature)`` of the raw logits, which is what GRPO's forward pass
    computes for the same ids.

    The KV cache of one call is kept for the next (``reuse_cache``): when every new context
    extends a context of the previous call (the rollout's next turn: the reply, then the env's
    tokens), only the new tokens are run through the model. Without it every turn re-runs the
    whole history, and at batch 8 that prefill is a third of a turn's time. The cache keeps the
    previous call's layout; positions that hold no token of a row (left padding, the tokens
    generated after a row's reply ended, the padding of the new segment) are masked out, and
    position ids count only unmasked tokens, so every row sees exactly its own sequence. Rows
    of episodes that ended are dropped from the cache. A cache that is not a plain
    ``DynamicCache`` (sliding window, static, quantized) is not reused.

    For a decoder whose layers all attend to the full context (SDPA or eager attention, no
    beams, no configured cache kind), the ``generate`` call runs :meth:`_decode` as its
    decoding loop: HF's logits processors and stopping criteria, sampling by inverse CDF
    (:func:`_sample_rows`), over a cache whose preallocated buffers are written in place and a
    preallocated mask of which one column is set per step. On a small model HF's own loop
    spends most of a step rebuilding the mask and concatenating the cache, so a batch-8 step
    cost about twice a batch-1 step; in this loop it costs little more. Other models keep HF's
    loop (:func:`_lean_decoding_fits` decides).
    """

    def __init__(
        self,
        model: Any,
        generation_config: Any,
        *,
        pad_token_id: int,
        eos_token_ids: Sequence[int],
        temperature: float = 1.0,
        reuse_cache: bool = True,
    ) -> None:
        self.model = model
        self.generation_config = generation_config
        self.pad_token_id = int(pad_token_id)
        self.eos_token_ids = [int(e) for e in eos_token_ids]
        self.temperature = float(temperature or 1.0)
        # A configured cache kind (static, quantized, ...) is the user's: never pass our own.
        self.reuse_cache = (
            bool(reuse_cache)
            and generation_config.use_cache is not False
            and getattr(generation_config, "cache_implementation", None) is None
        )
        #: Decode with :meth:`_decode` (a cache written in place) instead of HF's loop; models
        #: it cannot serve exactly (see :func:`_lean_decoding_fits`) use HF's own loop.
        self.lean = _lean_decoding_fits(model, generation_config)
        self._slots: Any = None
        self._layout: Any = None
        self.calls = 0
        self.reused = 0  # calls that extended the previous call's cache
        self._kv: Any = None  # the cache of the last call
        self._kv_ids: Any = None  # (rows, cached width): the ids laid out as in the cache
        self._kv_mask: Any = None  # (rows, cached width): 1 where a row's own token is cached
        self._kv_rows: list[list[int]] = []  # per row, the ids whose keys/values are cached

    def _match(self, contexts: Sequence[Sequence[int]]) -> list[int] | None:
        """The cached row each context extends (in order), or None when one extends none."""
        if self._kv is None:
            return None
        rows, start = [], 0
        for ctx in contexts:
            for r in range(start, len(self._kv_rows)):
                done = self._kv_rows[r]
                if len(ctx) > len(done) and list(ctx[: len(done)]) == done:
                    rows.append(r)
                    start = r + 1
                    break
            else:
                return None
        return rows

    def generate(
        self, contexts: Sequence[Sequence[int]], max_new_tokens: int
    ) -> tuple[list[list[int]], list[list[float]]]:
        import copy

        import torch

        self.calls += 1
        device = next(self.model.parameters()).device
        rows = self._match(contexts) if self.reuse_cache else None
        lean = self.lean
        cache = None
        if rows is None:
            done = [[] for _ in contexts]
            head_ids = torch.zeros((len(contexts), 0), dtype=torch.long)
            head_mask = torch.zeros((len(contexts), 0), dtype=torch.long)
            if lean:
                self._slots = _slot_cache()
        else:
            self.reused += 1
            index = torch.tensor(rows, dtype=torch.long)
            done = [self._kv_rows[r] for r in rows]
            head_ids, head_mask = self._kv_ids[index], self._kv_mask[index]
            if lean:
                if rows != list(range(len(self._kv_rows))):
                    self._slots.select(index.to(device))
                head_ids, head_mask = self._repack(head_ids, head_mask, device)
            else:
                cache = self._kv
                cache.batch_select_indices(index.to(device))
        self._kv = None  # consumed; set again below when the new cache is usable
        tails = [list(ctx[len(d) :]) for ctx, d in zip(contexts, done)]
        width = max(len(t) for t in tails)
        ids = torch.full((len(contexts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, tail in enumerate(tails):
            ids[row, width - len(tail) :] = torch.tensor(tail, dtype=torch.long)
            mask[row, width - len(tail) :] = 1
        ids, mask = torch.cat([head_ids, ids], dim=1), torch.cat([head_mask, mask], dim=1)
        config = copy.deepcopy(self.generation_config)
        config.max_new_tokens = int(max_new_tokens)
        config.min_new_tokens = None
        config.max_length = None
        config.output_logits = True
        config.return_dict_in_generate = True
        cache_name = _generation_names()[0]
        if lean:
            self._layout = mask.to(device)
            kwargs: dict[str, Any] = {"custom_generate": self._decode}
        else:
            kwargs = {} if cache is None else {cache_name: cache}
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                generation_config=config,
                **kwargs,
            )
        total = ids.shape[1]
        new = out.sequences[:, total:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu()  # (B, new, V)
        logps = torch.log_softmax(logits / self.temperature, dim=-1)
        chosen = logps.gather(-1, new[:, : logps.shape[1]].unsqueeze(-1)).squeeze(-1)
        replies, reply_logps = [], []
        for row in range(new.shape[0]):
            seq = new[row].tolist()
            cut = next((i + 1 for i, t in enumerate(seq) if t in self.eos_token_ids), len(seq))
            replies.append(seq[:cut])
            reply_logps.append(chosen[row, :cut].tolist())
        if lean:
            self._keep_slots(out, contexts, replies)
        elif self.reuse_cache:
            self._keep(out, contexts, replies, mask, total, new.shape[1])
        return replies, reply_logps

    def _repack(self, head_ids: Any, head_mask: Any, device: Any) -> tuple[Any, Any]:
        """Drop the cached columns no row owns any more: each row's own columns, in order,
        right-aligned in the fewest columns (keys keep their rotary positions, and attention
        does not depend on the order of the keys it sees)."""
        import torch

        counts = head_mask.sum(dim=1)
        width = int(counts.max()) if counts.numel() else 0
        if width == head_mask.shape[1]:
            return head_ids, head_mask
        total = head_mask.shape[1]
        # A row's other columns first, then its own in order; keep the last ``width``.
        key = head_mask * total + torch.arange(total)
        order = key.argsort(dim=1, stable=True)[:, total - width :]
        self._slots.gather(order.to(device))
        return head_ids.gather(1, order), head_mask.gather(1, order)

    def _decode(
        self,
        model: Any,
        input_ids: Any,
        logits_processor: Any,
        stopping_criteria: Any,
        generation_config: Any,
        **_: Any,
    ) -> Any:
        """The decoding loop ``generate`` runs (its ``custom_generate``): HF's sampling step with
        HF's logits processors and stopping criteria, over a cache written in place.

        The new segment (every row's tail, left-padded) is run once with a mask built here; then
        each step feeds one token per live row with a view of a preallocated additive mask (one
        column set per step) and the rows' position ids, so no step rebuilds a mask or copies the
        cache. A row whose reply ended is fed its last token once (its keys and values belong to
        the next turn's context) and then leaves the batch: the rows still decoding are kept
        first in the cache's buffers (a finished row swaps places with a live one), and each step
        runs the model on them alone. Its columns after the reply are masked out for every later
        query. At the end the rows are put back in the call's order.
        """
        import torch
        from transformers.generation.utils import GenerateDecoderOnlyOutput

        slots, valid = self._slots, self._layout.bool()
        rows, total = input_ids.shape
        start = slots.length
        width = total - start
        steps = int(generation_config.max_new_tokens)
        slots.reserve(total + steps)
        dtype = next(model.parameters()).dtype
        low = torch.finfo(dtype).min
        device = input_ids.device
        # After a reply ends its row holds generate's padding token, as in HF's own loop.
        pad = generation_config._pad_token_tensor
        fill = self.pad_token_id if pad is None else int(pad)
        seq = torch.full((rows, total + steps), fill, dtype=torch.long, device=device)
        seq[:, :total] = input_ids
        bias = torch.full((rows, total + steps), low, dtype=dtype, device=device)
        bias[:, :total].masked_fill_(valid, 0.0)
        # The segment: causal within it, every cached column of the row before it; a padding
        # query sees itself, so no row of the mask is empty.
        allowed = valid[:, None, :].expand(rows, width, total).clone()
        allowed[:, :, start:] &= torch.ones((width, width), dtype=torch.bool, device=device).tril()
        diag = torch.arange(width, device=device)
        allowed[:, diag, start + diag] = True
        seg_bias = torch.zeros(allowed.shape, dtype=dtype, device=device)
        seg_bias.masked_fill_(~allowed, low)
        positions = (valid.long().cumsum(dim=1) - 1).clamp(min=0)
        cache_name = _generation_names()[0]
        out = model(
            input_ids=input_ids[:, start:],
            attention_mask=seg_bias[:, None],
            position_ids=positions[:, start:],
            use_cache=True,
            logits_to_keep=1,
            **{cache_name: slots},
        )
        position = valid.long().sum(dim=1, keepdim=True)
        # Physical row i of every buffer below (and of the cache) holds the call's row order[i];
        # rows [0, fed) were fed by the last forward pass, and ended[i] says row i's reply ended.
        order = torch.arange(rows, device=device)
        ended = torch.zeros(rows, dtype=torch.bool, device=device)
        fed = rows
        raw: list[tuple[Any, Any]] = []
        cur = total
        while True:
            logits = out.logits[:, -1]
            n = fed
            if bool(ended[:fed].any()):
                n = int((~ended[:fed]).sum())
                gone = ended[:n].nonzero().squeeze(1)  # ended rows in the live part
                back = (~ended[n:fed]).nonzero().squeeze(1) + n  # live rows behind it
                moved = torch.cat([gone, back])
                source = torch.cat([back, gone])
                for buf in (seq, bias, position, order, ended):
                    buf[moved] = buf[source]
                slots.move_rows(moved, source)
                logits = logits.clone()
                logits[moved] = logits[source]
                logits = logits[:n]
            logits = logits.to(copy=True, dtype=torch.float32)
            raw.append((order[:n].clone(), logits))
            scores = logits_processor(seq[:n, :cur], logits)
            if generation_config.do_sample:
                token = _sample_rows(torch.softmax(scores, dim=-1))
            else:
                token = torch.argmax(scores, dim=-1)
            seq[:n, cur] = token
            cur += 1
            stop = stopping_criteria(seq[:n, :cur], None)
            if bool(stop.all()):
                break
            ended[:n] = stop
            bias[:n, cur - 1] = 0.0
            out = model(
                input_ids=token[:, None],
                attention_mask=bias[:n, None, None, :cur],
                position_ids=position[:n],
                use_cache=True,
                **{cache_name: slots},
            )
            position[:n] += 1
            fed = n
        if not bool((order == torch.arange(rows, device=device)).all()):
            back_to_call = order.argsort()
            seq, bias = seq[back_to_call], bias[back_to_call]
            slots.select(back_to_call)
        self._layout = bias[:, : cur - 1] == 0
        vocab = raw[0][1].shape[-1]
        step_logits = []
        for rows_of_step, step in raw:
            full = step.new_zeros((rows, vocab))
            full[rows_of_step] = step
            step_logits.append(full)
        return GenerateDecoderOnlyOutput(sequences=seq[:, :cur], logits=tuple(step_logits))

    def _keep_slots(
        self, out: Any, contexts: Sequence[Sequence[int]], replies: list[list[int]]
    ) -> None:
        """After a lean call: the ids laid out as cached, which of them each row owns."""
        cached = self._slots.length
        self._kv = self._slots if self.reuse_cache else None
        self._kv_ids = out.sequences[:, :cached].cpu()
        self._kv_mask = self._layout.long().cpu()
        grown = len(out.logits) - 1  # the last sampled token was never fed
        self._kv_rows = [list(ctx) + reply[:grown] for ctx, reply in zip(contexts, replies)]

    def _keep(
        self,
        out: Any,
        contexts: Sequence[Sequence[int]],
        replies: list[list[int]],
        mask: Any,
        total: int,
        steps: int,
    ) -> None:
        """Keep the call's cache for the next turn, with its layout and the rows' cached ids."""
        import torch

        cache = getattr(out, _generation_names()[1], None)
        # The last sampled token was never fed to the model: the cache stops one short.
        cached = total + steps - 1
        if steps < 1 or not _plain_dynamic_cache(cache) or cache.get_seq_length() != cached:
            return
        grown = torch.zeros((len(replies), steps - 1), dtype=torch.long)
        for row, reply in enumerate(replies):
            grown[row, : min(len(reply), steps - 1)] = 1
        self._kv = cache
        self._kv_ids = out.sequences[:, :cached].cpu()
        self._kv_mask = torch.cat([mask, grown], dim=1)
        self._kv_rows = [list(ctx) + reply[: steps - 1] for ctx, reply in zip(contexts, replies)]


def _sample_rows(probs: Any) -> Any:
    """One token per row drawn from ``probs`` (rows of a distribution), by inverse CDF.

    The same distribution as ``torch.multinomial(probs, 1)`` from one uniform draw per row of
    torch's seeded generator; ``multinomial`` runs an exponential race over the whole
    vocabulary, which at batch 8 costs more than the tiny model's forward pass. A token of
    probability 0 (filtered out by top-k, top-p or min-p) is never drawn: the draw stays
    strictly below the total mass, and the first index whose cumulative mass exceeds it has
    mass of its own.
    """
    import torch

    cdf = probs.cumsum(dim=-1)
    top = cdf[:, -1:]
    draw = torch.rand(top.shape, dtype=cdf.dtype, device=cdf.device) * top
    draw = torch.minimum(draw, torch.nextafter(top, torch.zeros_like(top)))
    return torch.searchsorted(cdf, draw, right=True).squeeze(1)


def _lean_decoding_fits(model: Any, generation_config: Any) -> bool:
    """Whether :meth:`HFTurnGenerator._decode` computes exactly what HF's sampling loop would.

    It needs a decoder-only model whose every layer attends to the full context (no sliding
    window), with SDPA or eager attention (both take an additive 4D mask as given), plain
    sampling or greedy search (one sequence per row, no beams, no assistant model), no cache
    kind or compilation configured by the user, and a ``generate`` that takes a decoding
    function (``custom_generate``) and the cache as ``cache``.
    """
    import inspect

    try:
        from transformers.generation.utils import GenerationMixin
    except ImportError:  # pragma: no cover - transformers is required by the extra
        return False
    if "custom_generate" not in inspect.signature(GenerationMixin.generate).parameters:
        return False
    if _generation_names()[0] != "cache":
        return False
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None:
        if any(t != "full_attention" for t in layer_types):
            return False
    elif getattr(text, "sliding_window", None) is not None and getattr(
        text, "use_sliding_window", True
    ):
        return False
    g = generation_config
    return (
        g.use_cache is not False
        and getattr(g, "cache_implementation", None) is None
        and getattr(g, "compile_config", None) is None
        and (g.num_beams or 1) == 1
        and (g.num_return_sequences or 1) == 1
        and getattr(g, "assistant_early_exit", None) is None
        and getattr(g, "prompt_lookup_num_tokens", None) is None
    )


def _slot_cache() -> Any:
    """A transformers ``Cache`` whose layers keep keys and values in preallocated buffers.

    ``reserve(n)`` makes room for ``n`` columns (growing by copy, at most once per call);
    ``update`` writes the new columns in place and returns views of the used ones; ``select``
    keeps the given rows. Every layer holds the same columns, so ``length`` is the cache's.
    """
    from transformers.cache_utils import Cache, CacheLayerMixin

    class SlotLayer(CacheLayerMixin):
        is_sliding = False
        is_compileable = False
        is_croppable = False

        def __init__(self, owner: Any) -> None:
            super().__init__()
            self.owner = owner
            self.length = 0

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            self.device = key_states.device
            self.is_initialized = True

        def _room(self, buf: Any, like: Any) -> Any:
            import torch

            need = self.owner.capacity
            if buf is not None and buf.shape[2] >= need:
                return buf
            rows, heads, _, dim = like.shape if buf is None else buf.shape
            # Zeros, not empty: columns a row never wrote are masked out, and must be finite.
            grown = torch.zeros((rows, heads, need, dim), dtype=like.dtype, device=like.device)
            if buf is not None:
                grown[:, :, : self.length] = buf[:, :, : self.length]
            return grown

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self.keys = self._room(self.keys, key_states)
            self.values = self._room(self.values, value_states)
            end = self.length + key_states.shape[-2]
            fed = key_states.shape[0]  # the first rows: the rows still decoding
            self.keys[:fed, :, self.length : end] = key_states
            self.values[:fed, :, self.length : end] = value_states
            self.length = end
            return self.keys[:fed, :, :end], self.values[:fed, :, :end]

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.length + query_length, 0

        def get_seq_length(self) -> int:
            return self.length

        def get_max_length(self) -> int:
            return -1

    class SlotCache(Cache):
        def __init__(self) -> None:
            self.capacity = 0
            super().__init__(layer_class_to_replicate=lambda: SlotLayer(self))

        @property
        def length(self) -> int:
            return self.layers[0].length if self.layers else 0

        def reserve(self, columns: int) -> None:
            self.capacity = max(self.capacity, int(columns))

        def gather(self, columns: Any) -> None:
            """Keep, per row, the given cached columns (rows x width), in that order."""
            for layer in self.layers:
                if layer.keys is None:
                    continue
                for name in ("keys", "values"):
                    buf = getattr(layer, name)
                    rows, heads, _, dim = buf.shape
                    index = columns[:, None, :, None].expand(rows, heads, columns.shape[1], dim)
                    kept = buf[:, :, : layer.length].gather(2, index)
                    buf[:, :, : columns.shape[1]] = kept
                layer.length = columns.shape[1]

        def move_rows(self, rows: Any, sources: Any) -> None:
            """Row ``rows[i]`` of every buffer takes the contents of row ``sources[i]``."""
            for layer in self.layers:
                if layer.keys is not None:
                    layer.keys[rows] = layer.keys[sources]
                    layer.values[rows] = layer.values[sources]

        def select(self, index: Any) -> None:
            for layer in self.layers:
                if layer.keys is not None:
                    layer.keys = layer.keys.index_select(0, index)
                    layer.values = layer.values.index_select(0, index)

    return SlotCache()


def _generation_names() -> tuple[str, str]:
    """The name of ``generate``'s cache argument and of its output field (renamed in 5.x)."""
    try:
        from transformers.generation.utils import GenerateDecoderOnlyOutput
    except ImportError:  # pragma: no cover - transformers is required by the extra
        return "past_key_values", "past_key_values"
    fields = getattr(GenerateDecoderOnlyOutput, "__dataclass_fields__", {})
    name = "cache" if "cache" in fields else "past_key_values"
    return name, name


def _plain_dynamic_cache(cache: Any) -> bool:
    """Whether ``cache`` is a ``DynamicCache`` of full-attention layers (safe to extend)."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # pragma: no cover
        return False
    if type(cache) is not DynamicCache:
        return False
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


class VLLMTurnGenerator:
    """Generation through TRL's own vLLM generation object (``trainer.vllm_generation``).

    Every turn sends one context per episode of this rank, finished ones included (a one-token
    stand-in), because in server mode TRL gathers the prompts of all ranks and slices the answer
    by rank assuming equal counts. The sampling settings are the ones TRL gave that object; the
    per-turn token cap is set on it for the call. Log-probabilities are vLLM's (top-1 kept).
    """

    def __init__(self, vllm_generation: Any, *, filler_id: int) -> None:
        self.vllm = vllm_generation
        self.filler_id = int(filler_id)
        self.calls = 0

    def generate(
        self, contexts: Sequence[Sequence[int]], max_new_tokens: int
    ) -> tuple[list[list[int]], list[list[float]]]:
        self.calls += 1
        saved = self.vllm.max_completion_length
        self.vllm.max_completion_length = int(max_new_tokens)
        try:
            _, completion_ids, logprobs, _ = self.vllm.generate(
                prompts=[list(c) for c in contexts], images=None, num_generations=1
            )
        finally:
            self.vllm.max_completion_length = saved
        logps = [[float(lp[0]) for lp in seq] for seq in logprobs]
        return [list(c) for c in completion_ids], logps


# ---------------------------------------------------------------------- the rollout
class BudgetMixRollout:
    """A GRPO ``rollout_func`` that plays multi-turn BudgetMix episodes, batched.

    Each prompt (already repeated ``num_generations`` times by GRPO) becomes one episode; a
    prompt made by :func:`task_prompt` fixes the task, any other prompt gets a task drawn from a
    generator seeded by (seed, rank, episode), shared by the repeats of that prompt. Budgets are
    drawn per episode by the env's :class:`BudgetWrapper`, seeded by (seed, rank, episode), or
    one per group with ``budget_per="group"``. Each turn, one generation call serves every live
    episode of the batch; the reply's action is :func:`action_from_reply` of its text (a
    reasoning block stays in the trained ids but is not played). The env's answer is appended
    as a user turn with ``env_mask`` 0.

    An episode ends with a ``stop_reason`` of :data:`STOP_REASONS`: the env terminated (``won``
    or ``lost``) or truncated (``budget``); a reply did not end within ``max_turn_tokens``; or
    the next turn would not fit in the trainer's ``max_completion_length``.

    Under the trainer, generation runs under TRL's ``unwrap_model_for_generation`` with the
    trainer's ``generation_config`` (GRPOConfig's sampling settings and generation_kwargs), the
    prompt is rendered with GRPOConfig's ``chat_template_kwargs``, the sampler is seeded per
    (seed, rank, step); with ``use_vllm=True`` generation goes through ``trainer.vllm_generation``
    (:class:`VLLMTurnGenerator`).

    Returns ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` and, for reward
    functions, ``env_reward`` (the episode's summed reward), ``won``, ``turns``, ``budget``,
    ``task_id`` and ``stop_reason``.

    Example:
        Needs a model and a trainer, so this one is not run as a test::

            rollout = BudgetMixRollout("BudgetMix/ToolUse-v0", budget=(4, 12))
            trainer = GRPOTrainer(model, reward_funcs=env_reward, rollout_func=rollout, ...)
    """

    def __init__(
        self,
        env: str | gym.Env,
        *,
        budget: Any = DEFAULT_BUDGET,
        visibility: str = "hidden",
        faults: Any = None,
        process_reward: float | None = None,
        system_prompt: str | None = SYSTEM_PROMPT,
        show_actions: bool = True,
        max_turn_tokens: int = 24,
        budget_per: str = "episode",
        seed: int = 0,
        env_kwargs: dict[str, Any] | None = None,
    ) -> None:
        """Build the env (an id with wrapper options, or a ready env) and the task generator.

        Args:
            env: a BudgetMix id, or an env already wrapped in a BudgetWrapper (the batch plays
                on copies made with :func:`make_env_like`).
            budget, visibility, faults: the wrapper options of ``gymnasium.make`` (with an id).
            process_reward: scale of the :class:`ProcessReward` signal added to the reward.
            system_prompt: the system message (None for none).
            show_actions: list the admissible actions under each observation.
            max_turn_tokens: the longest reply of one turn, in tokens.
            budget_per: ``"episode"`` (a budget draw per episode) or ``"group"`` (one per
                prompt group, shared by its repeats).
            seed: seeds every task, budget and sampler draw (with the rank and episode/step).
            env_kwargs: extra constructor kwargs of the env (with an id).
        """
        if isinstance(max_turn_tokens, bool) or not isinstance(max_turn_tokens, int):
            raise TypeError(f"max_turn_tokens must be an int, got {max_turn_tokens!r}")
        if max_turn_tokens < 1:
            raise ValueError(f"max_turn_tokens must be at least 1, got {max_turn_tokens!r}")
        if budget_per not in ("episode", "group"):
            raise ValueError(f"budget_per must be 'episode' or 'group', got {budget_per!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        if isinstance(env, str):
            env_id = env
            self._make = lambda: make_env(
                env_id,
                budget=budget,
                visibility=visibility,
                faults=faults,
                process_reward=process_reward,
                **(env_kwargs or {}),
            )
            env = self._make()
        elif isinstance(env, gym.Env):
            template = env
            self._make = lambda: make_env_like(template)
        else:
            raise TypeError(f"env must be an env id or a gymnasium.Env, got {env!r}")
        self.env = env
        self._pool: list[gym.Env] = [env]
        self.system_prompt = system_prompt
        self.show_actions = bool(show_actions)
        self.max_turn_tokens = int(max_turn_tokens)
        self.budget_per = budget_per
        self.seed = int(seed)
        self._episodes = 0  # episodes started on this rank: the episode index of the seeds
        self._calls: dict[int, int] = {}  # rollout calls per trainer step (sampler seeds)
        self._dialogue: _Dialogue | None = None
        self.last_episodes: list[RolloutEpisode] = []
        self.last_generation_calls = 0
        #: Keep the KV cache from one turn to the next (see :class:`HFTurnGenerator`).
        self.reuse_cache = True
        self.last_cache_reuses = 0

    def to_json(self) -> dict[str, Any]:
        """The settings a policy needs to play as it was trained (see ``PolicyAgent``)."""
        return {
            "system_prompt": self.system_prompt,
            "show_actions": self.show_actions,
            "max_turn_tokens": self.max_turn_tokens,
        }

    # ------------------------------------------------------------------ GRPO entry point
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        _require()
        import torch
        from trl.models.utils import unwrap_model_for_generation

        tokenizer = trainer.processing_class
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer
        args = trainer.args
        rank = int(trainer.accelerator.process_index)
        step = int(trainer.state.global_step)
        call = self._calls.get(step, 0)
        self._calls = {step: call + 1}
        limit = int(trainer.max_completion_length)
        kwargs = dict(getattr(trainer, "chat_template_kwargs", None) or {})
        training = trainer.model.training
        group = trainer.num_generations if training else trainer.num_generations_eval
        group = int(group or 1)
        sampler_seed = _seed(self.seed, rank, step, call, 1)
        eos_ids = list(trainer.eos_token_ids)
        if trainer.use_vllm:
            gen = VLLMTurnGenerator(trainer.vllm_generation, filler_id=eos_ids[0])
            return self._as_output(
                self._play_all(prompts, gen, tokenizer, limit, kwargs, rank, group, eos_ids, True)
            )
        device = trainer.accelerator.device
        devices = [device] if device.type == "cuda" else []
        with (
            torch.random.fork_rng(devices=devices),
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=args.ds3_gather_for_generation,
                generation_kwargs=trainer.generation_kwargs,
                gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
            ) as model,
        ):
            torch.manual_seed(sampler_seed)
            gen = HFTurnGenerator(
                model,
                trainer.generation_config,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_ids=eos_ids,
                temperature=trainer.temperature,
                reuse_cache=self.reuse_cache,
            )
            was_training = model.training
            model.eval()  # no dropout while sampling, so the log-probs match the sampler
            try:
                episodes = self._play_all(
                    prompts, gen, tokenizer, limit, kwargs, rank, group, eos_ids, False
                )
            finally:
                model.train(was_training)
        return self._as_output(episodes)

    @staticmethod
    def _as_output(episodes: list[RolloutEpisode]) -> dict[str, list]:
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": [e.logprobs for e in episodes],
            "env_mask": [e.env_mask for e in episodes],
            "env_reward": [e.reward for e in episodes],
            "won": [e.won for e in episodes],
            "turns": [e.turns for e in episodes],
            "budget": [e.budget for e in episodes],
            "task_id": [e.task_id for e in episodes],
            "stop_reason": [e.stop_reason for e in episodes],
        }

    def play(
        self,
        prompts: Sequence[Any],
        model: Any,
        tokenizer: Any,
        *,
        max_completion_length: int = 256,
        generation_config: Any = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        sampler_seed: int | None = None,
        rank: int = 0,
    ) -> list[RolloutEpisode]:
        """Play one episode per prompt with ``model``, outside a trainer; ``len(prompts)``
        episodes, batched like the trainer path (repeats of one prompt form a group).

        ``generation_config`` defaults to sampling at temperature 1 with no top-k/top-p
        filtering; ``sampler_seed`` (default: from the seed and the episode counter) seeds it.
        """
        _require()
        import torch
        from transformers import GenerationConfig

        eos = tokenizer.eos_token_id
        eos_ids = [eos] if isinstance(eos, int) else list(eos)
        if generation_config is None:
            generation_config = GenerationConfig(
                do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=None
            )
        generation_config.pad_token_id = tokenizer.pad_token_id
        generation_config.eos_token_id = eos_ids
        seed = _seed(self.seed, rank, self._episodes, 2) if sampler_seed is None else sampler_seed
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            gen = HFTurnGenerator(
                model,
                generation_config,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_ids=eos_ids,
                temperature=generation_config.temperature or 1.0,
                reuse_cache=self.reuse_cache,
            )
            was_training = model.training
            model.eval()
            try:
                return self._play_all(
                    prompts,
                    gen,
                    tokenizer,
                    int(max_completion_length),
                    dict(chat_template_kwargs or {}),
                    rank,
                    0,
                    eos_ids,
                    False,
                )
            finally:
                model.train(was_training)

    # ------------------------------------------------------------------ internals
    def _groups(self, prompts: Sequence[Any], group: int) -> list[int]:
        """The group index of each prompt: blocks of ``group`` (the trainer's num_generations),
        or runs of equal prompts when ``group`` is 0."""
        if group > 0:
            return [i // group for i in range(len(prompts))]
        out, last, g = [], object(), -1
        for p in prompts:
            key = p if isinstance(p, str) else repr(p)
            if key != last:
                g, last = g + 1, key
            out.append(g)
        return out

    def _task_for(self, prompt: Any, draw_seed: int) -> str:
        text = prompt if isinstance(prompt, str) else json.dumps(prompt, default=str)
        match = _TASK_TAG.search(text)
        if match:
            return match.group(1)
        ids = self.env.unwrapped.task_ids
        return ids[int(np.random.default_rng(draw_seed).integers(len(ids)))]

    def _envs(self, n: int) -> list[gym.Env]:
        while len(self._pool) < n:
            self._pool.append(self._make())
        return self._pool[:n]

    def _play_all(
        self,
        prompts: Sequence[Any],
        gen: Any,
        tokenizer: Any,
        limit: int,
        template_kwargs: dict[str, Any],
        rank: int,
        group: int,
        eos_ids: Sequence[int],
        lockstep: bool,
    ) -> list[RolloutEpisode]:
        if limit < 2:
            raise ValueError(f"max_completion_length must be at least 2, got {limit!r}")
        if (
            self._dialogue is None
            or self._dialogue.tok is not tokenizer
            or self._dialogue.kwargs != template_kwargs
        ):
            self._dialogue = _Dialogue(tokenizer, self.system_prompt, template_kwargs)
        dialogue = self._dialogue
        envs = self._envs(len(prompts))
        groups = self._groups(prompts, group)
        first_of: dict[int, int] = {}
        group_budget: dict[int, int] = {}
        states: list[_TokenEpisode] = []
        for i, (prompt, env) in enumerate(zip(prompts, envs)):
            index = self._episodes
            self._episodes += 1
            g = groups[i]
            first = first_of.setdefault(g, index)
            task_id = self._task_for(prompt, _seed(self.seed, rank, first, 3))
            seed = _seed(self.seed, rank, index, 0)
            options: dict[str, Any] = {"task_id": task_id}
            if self.budget_per == "group" and g in group_budget:
                options["budget"] = group_budget[g]
            with contextlib.suppress(AttributeError):
                # A budget schedule follows this rank's episode count, not one env's.
                env.set_wrapper_attr("episodes", index)
            obs, info = env.reset(seed=seed, options=options)
            budget = int(info.get("budget", {}).get("limit", 0))
            group_budget.setdefault(g, budget)
            st = _TokenEpisode(
                dialogue,
                _user_text(obs, info, self.show_actions),
                limit,
                self.max_turn_tokens,
                eos_ids,
            )
            st.ep.budget, st.ep.task_id, st.ep.seed = budget, task_id, seed
            states.append(st)
        calls_before = gen.calls
        while True:
            live = [i for i, st in enumerate(states) if not st.over]
            if lockstep and not self._any_rank_live(bool(live)):
                break
            if not lockstep and not live:
                break
            if lockstep:
                # The same cap on every rank (the server applies one); rooms clip per episode.
                new_tokens = (
                    self.max_turn_tokens
                )  # every episode of this rank takes part (see VLLMTurnGenerator)
                contexts = [st.context() if not st.over else [gen.filler_id] for st in states]
                replies, logps = gen.generate(contexts, new_tokens)
                replies, logps = [replies[i] for i in live], [logps[i] for i in live]
            else:
                rooms = [states[i].room() for i in live]
                new_tokens = min(self.max_turn_tokens, max(rooms))
                replies, logps = gen.generate([states[i].context() for i in live], new_tokens)
            for i, reply, lp in zip(live, replies, logps):
                st, env = states[i], envs[i]
                action = st.take_reply(reply, lp)
                if action is None:
                    continue
                obs, reward, terminated, truncated, info = env.step(action)
                st.ep.actions.append(action)
                st.ep.reward += float(reward)
                st.ep.turns += 1
                if terminated or truncated:
                    st.over = True
                    st.ep.won = bool(info.get("won", False))
                    fallback = ("won" if st.ep.won else "lost") if terminated else "budget"
                    st.ep.stop_reason = str(info.get("stop_reason") or fallback)
                    continue
                st.take_observation(_user_text(obs, info, self.show_actions))
        episodes = [st.ep for st in states]
        self.last_episodes = episodes
        self.last_generation_calls = gen.calls - calls_before
        self.last_cache_reuses = int(getattr(gen, "reused", 0))
        if logger.isEnabledFor(logging.INFO):
            counts = {w: sum(e.stop_reason == w for e in episodes) for w in STOP_REASONS}
            logger.info("rollout: %d episodes, stop reasons %s", len(episodes), counts)
        return episodes

    @staticmethod
    def _any_rank_live(mine: bool) -> bool:
        """Whether any rank still has a live episode (vLLM server mode gathers every turn)."""
        try:
            import torch.distributed as dist
        except ImportError:  # pragma: no cover - torch is required by the extra
            return mine
        if not (dist.is_available() and dist.is_initialized()):
            return mine
        import torch

        flag = torch.tensor([1 if mine else 0])
        if dist.get_backend() == "nccl":
            flag = flag.cuda()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


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
    base = env.unwrapped
    ids = list(base.task_ids if task_ids is None else task_ids)
    rng = np.random.default_rng(seed)
    out = []
    eos = tokenizer.eos_token_id
    for k in range(n_episodes):
        obs, info = env.reset(seed=seed + k, options={"task_id": ids[int(rng.integers(len(ids)))]})
        tokens = dialogue.prompt_ids(_user_text(obs, info, rollout.show_actions))
        mask = [0] * len(tokens)
        for _ in range(200):
            best = base.oracle_actions()
            if not best:
                break
            reply = tokenizer.encode(best[0], add_special_tokens=False) + [eos]
            tokens += reply
            mask += [1] * len(reply)
            obs, _, terminated, truncated, info = env.step(best[0])
            if terminated or truncated:
                break
            env_ids = dialogue.env_ids(_user_text(obs, info, rollout.show_actions), True)
            tokens += env_ids
            mask += [0] * len(env_ids)
        out.append((tokens, mask))
    return out


# ---------------------------------------------------------------------- environment_factory
class BudgetMixToolEnv:
    """An ``environment_factory`` class for ``GRPOTrainer``: the env's actions as tools.

    TRL builds instances as it needs them and pools them across batches, calling
    ``reset(**row)`` with the dataset row (each row repeated ``num_generations`` times). The
    generations of one row play one task: the row's ``task_id`` when it has one, else a task
    drawn from the row's content and the seed. Budgets are drawn per episode (a seed per
    instance, from an instance counter and the rank, and per reset), or one per row with
    ``budget_per="group"``. :meth:`act` is the tool (for an env with an OpenAI tools schema,
    one method per tool instead, see :meth:`factory`).

    One tool call is one turn of the budget, the same definition as in evaluation (where the
    tool-use env takes exactly one tool call per message). The call that uses the last turn, and
    any call after it, raises :class:`BudgetExhausted` with the observation, so the model learns
    the budget ran out. :meth:`get_reward` gives the episode's summed reward; ``turns`` (turns
    played), :attr:`stop_reason`, ``task_id`` and ``budget`` (its T) serve reward functions,
    which TRL hands the batch's instances as ``environments=``. :func:`make_tool_dataset` makes
    the conversational prompt dataset this path needs.

    Use :meth:`factory`::

        GRPOTrainer(..., environment_factory=BudgetMixToolEnv.factory(
            "BudgetMix/WebShop-v0", budget=(5, 20), visibility="remaining"))
    """

    env_id: str = ""
    env_options: dict[str, Any] = {}
    seed: int = 0
    rank: int | None = None
    budget_per: str = "episode"
    _counter: Iterator[int] = itertools.count()

    def __init__(self) -> None:
        if not self.env_id:
            raise TypeError(
                "BudgetMixToolEnv needs an env id: use BudgetMixToolEnv.factory(env_id, ...)"
            )
        rank = self.rank if self.rank is not None else int(os.environ.get("RANK", "0") or 0)
        self.instance = next(type(self)._counter)
        self._seed = _seed(self.seed, rank, self.instance, 4)
        self.env = make_env(self.env_id, **self.env_options)
        self.reward = 0.0
        self.over: str | None = None
        self.turns = 0
        self.resets = 0
        self.task_id: str | None = None
        self.budget = 0

    @classmethod
    def factory(
        cls,
        env_id: str,
        *,
        seed: int = 0,
        rank: int | None = None,
        budget_per: str = "episode",
        **options: Any,
    ) -> Callable[[], BudgetMixToolEnv]:
        """A zero-argument callable building instances for ``env_id`` (options as in make_env).

        ``seed`` and the rank (default: the ``RANK`` environment variable that torchrun and
        accelerate set, else 0) seed the task and budget draws with an instance counter.
        When the env publishes an OpenAI tools schema (``info["tools"]``, the tool-use family),
        every tool becomes a method of its own (its call is sent as the env's JSON tool call)
        instead of the generic :meth:`act`.
        """
        if not isinstance(env_id, str) or not env_id:
            raise TypeError(f"env_id must be a non-empty str, got {env_id!r}")
        if budget_per not in ("episode", "group"):
            raise ValueError(f"budget_per must be 'episode' or 'group', got {budget_per!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        name = "BudgetMixToolEnv_" + re.sub(r"\W", "_", env_id)
        attrs: dict[str, Any] = {
            "env_id": env_id,
            "env_options": dict(options),
            "seed": seed,
            "rank": rank,
            "budget_per": budget_per,
            "_counter": itertools.count(),
        }
        probe = make_env(env_id, **options)
        try:
            _, info = probe.reset(seed=seed)
        finally:
            probe.close()
        schemas = info.get("tools") or []
        if schemas:
            attrs["act"] = None  # the env's own tools replace the generic text channel
            for schema in schemas:
                fn = schema.get("function", schema)
                if fn["name"] in ("reset", "get_reward") or fn["name"].startswith("_"):
                    raise ValueError(
                        f"{env_id} has a tool named {fn['name']!r}, which TRL reserves"
                    )
                attrs[fn["name"]] = _schema_method(fn)
        return type(name, (cls,), attrs)

    @staticmethod
    def _row_key(row: dict[str, Any]) -> int:
        """A stable hash of a dataset row (the same in every process)."""
        text = json.dumps(row, sort_keys=True, default=str)
        return zlib.crc32(text.encode("utf-8"))

    def reset(self, **row: Any) -> str:
        """Start an episode on the row's task; returns the first observation."""
        key = self._row_key(row)
        if row.get("task_id") is not None:
            task_id = str(row["task_id"])
        else:
            ids = self.env.unwrapped.task_ids
            task_id = ids[int(np.random.default_rng([self.seed, key]).integers(len(ids)))]
        options: dict[str, Any] = {"task_id": task_id}
        if self.budget_per == "group":
            # The row's repeats sit on instances with the same reset count in one batch.
            spec = self.env.get_wrapper_attr("budget_spec")
            rng = np.random.default_rng([self.seed, key, self.resets])
            options["budget"] = int(spec.sample(rng, self.resets))
        obs, info = self.env.reset(seed=_seed(self._seed, self.resets), options=options)
        self.resets += 1
        self.task_id = task_id
        self.budget = int(info.get("budget", {}).get("limit", 0))
        self.reward = 0.0
        self.over = None
        self.turns = 0
        return "\n" + _user_text(obs, info, True)

    def act(self, command: str) -> str:
        """Send one command to the environment; each call uses one turn of the budget.

        Args:
            command: The action to take, as text (for example "go east" or "search[red shoes]").

        Returns:
            What the environment answers.
        """
        return self._run(str(command))

    def _run(self, action: str) -> str:
        """Play one turn; raise at the end of the budget (see the class docstring)."""
        if self.over == "budget":
            raise BudgetExhausted(
                "Budget exhausted: no turns are left in this episode; no action can run."
            )
        if self.over is not None:
            raise EpisodeOver(f"The episode is over ({self.over}); no action can run.")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.turns += 1
        self.reward += float(reward)
        if terminated:
            self.over = str(info.get("stop_reason") or ("won" if info.get("won") else "lost"))
            return obs
        if truncated:
            self.over = "budget"
            limit = info.get("budget", {}).get("limit", "?")
            raise BudgetExhausted(
                f"Budget exhausted: that was turn {limit} of {limit}, the last one; "
                f"the episode ends unsolved. Last observation: {obs}"
            )
        return _user_text(obs, info, True)

    @property
    def stop_reason(self) -> str | None:
        """``won``, ``lost`` or ``budget`` once the episode is over, else None."""
        return self.over

    def get_reward(self) -> float:
        """The episode's summed reward (with ProcessReward when configured)."""
        return self.reward


def _schema_method(fn: dict[str, Any]) -> Callable[..., str]:
    """A method for one OpenAI tool schema, typed and documented so TRL can render its schema."""
    import inspect

    tool_name = fn["name"]
    params = fn.get("parameters", {}) or {}
    props = params.get("properties", {}) or {}
    required = set(params.get("required", []) or [])
    kinds = {"string": str, "integer": int, "number": float, "boolean": bool}

    def method(self: BudgetMixToolEnv, **kwargs: Any) -> str:
        return self._run(tool_call_action(tool_name, kwargs))

    sig = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    doc_args = []
    for pname, spec in props.items():
        kind = kinds.get(spec.get("type"), str)
        if pname in required:
            sig.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, annotation=kind))
            annotations[pname] = kind
        else:
            sig.append(
                inspect.Parameter(
                    pname, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind | None
                )
            )
            annotations[pname] = kind | None
        doc_args.append(f"    {pname}: {' '.join(str(spec.get('description', pname)).split())}")
    annotations["return"] = str
    method.__signature__ = inspect.Signature(sig, return_annotation=str)
    method.__annotations__ = annotations
    method.__name__ = method.__qualname__ = tool_name
    description = " ".join(str(fn.get("description", tool_name)).split())
    method.__doc__ = (
        description
        + ("\n\nArgs:\n" + "\n".join(doc_args) if doc_args else "")
        + "\n\nReturns:\n    The tool's JSON result."
    )
    return method


def train(
    env_id: str,
    *,
    budget: Any = DEFAULT_BUDGET,
    visibility: str = "hidden",
    env_kwargs: dict[str, Any] | None = None,
    seed: int = 0,
    out_dir: str | os.PathLike[str],
    iterations: int = 20,
    progress: Callable[[dict[str, Any]], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Train a policy on ``env_id`` with GRPO through :class:`BudgetMixRollout`.

    See :func:`budget_envs.integrations.trl_train.train` for the options and the metrics.
    """
    from budget_envs.integrations.trl.training import train as _train

    return _train(
        env_id,
        budget=budget,
        visibility=visibility,
        env_kwargs=env_kwargs,
        seed=seed,
        out_dir=out_dir,
        iterations=iterations,
        progress=progress,
        **options,
    )


def load_policy(
    model_dir: str | os.PathLike[str],
    *,
    seed: int = 0,
    check_visibility: bool = True,
    name: str | None = None,
    temperature: float | None = None,
    threads: int | None = None,
) -> Any:
    """A policy folder written by :func:`train` as an eval agent (what ``policy:DIR`` plays).

    Returns a :class:`~budget_envs.integrations.trl_train.PolicyAgent` named ``name`` (default
    ``policy:<folder name>``); it refuses an evaluation whose budget visibility differs from
    the training's unless ``check_visibility`` is False.
    """
    from pathlib import Path

    from budget_envs.integrations.trl.training import PolicyAgent

    return PolicyAgent(
        model_dir,
        name=name or f"policy:{Path(model_dir).name}",
        seed=seed,
        check_visibility=check_visibility,
        temperature=temperature,
        threads=threads,
    )
