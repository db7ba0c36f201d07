"""The ``lm`` agent: a transformers language model in the evaluation process.

``--agent 'smol=lm:model=smollm2-135m,temperature=0.7,max_tokens=64'`` plays every family with a
real model and no server. Each episode is a chat: the family's system prompt, the goal and the
first observation, then one assistant reply and one observation per turn, rendered with the
model's own chat template. With ``show_actions`` (the default) each observation lists the actions
the env offers (``info["candidate_actions"]``), as published ALFWorld and WebShop agent prompts
do. The action is taken out of the reply by :func:`~budget_envs.eval.prompts.reply_action`
(think blocks dropped, ``<tool_call>`` blocks and JSON kept whole on one line, else the first
line), so no action holds a newline.

Each episode keeps its token ids and KV cache from turn to turn (only the new observation is run
through the model), and the live episodes of a worker are decoded together: the eval runner's
async driver keeps ``concurrency`` episodes going, and every episode waiting for a reply joins
the next batch (:class:`~budget_envs.integrations.lm.engine.BatchGenerator`). The same agent
plays one call at a time through ``reset`` / ``act`` (single-step probes, ``transcript``).

A reply that reaches ``max_tokens`` without ending is cut: its first line is the action when it
has a complete one, else the turn is an empty (invalid) action, as the ``chat`` agent does with
a reply its server cut. When the conversation would outgrow the model's context the episode
sends empty actions until the budget ends it.

Sampling is seeded by the agent's seed, the episode's seed and the turn, so a rerun gives the
same transcript. The model loads on first use (a worker process loads its own copy).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from budget_envs.errors import AgentError
from budget_envs.eval.prompts import (
    DEFAULT_PROMPTS,
    MAX_SHOWN_ACTIONS,
    reply_action,
    system_prompt,
    with_actions,
)
from budget_envs.integrations.lm.engine import BatchGenerator, Conversation, Request
from budget_envs.integrations.trl.scoring import (
    ACTION_MODES,
    SCORING_MODES,
    candidate_ids,
    check_mode,
)

__all__ = [
    "LMAgent",
    "LMEpisode",
    "episode_dialogue",
    "load_lm",
    "next_text",
    "render_first",
    "render_system",
]

#: Appended to a tool-using family's system prompt when the chat template has no tool support.
TOOL_FORMAT = (
    "Reply with one tool call as JSON on one line: "
    '{"tool_calls":[{"name":"TOOL","arguments":{...}}]}. The tools:'
)


def _seed(*parts: int) -> int:
    import numpy as np

    return int(np.random.SeedSequence([int(p) % 2**63 for p in parts]).generate_state(1)[0])


def render_system(env_id: str, info: Mapping[str, Any], *, native_tools: bool) -> str:
    """The system prompt of an episode: the family's prompt, and for a tool-using family whose
    tools the chat template cannot carry, the call format and one line per tool."""
    text = system_prompt(env_id, info, DEFAULT_PROMPTS)
    tools = info.get("tools") or []
    if tools and not native_tools:
        lines = [text, TOOL_FORMAT]
        for tool in tools:
            fn = tool.get("function", tool) if isinstance(tool, Mapping) else {}
            params = (fn.get("parameters") or {}).get("properties") or {}
            args = ", ".join(params)
            lines.append(f"- {fn.get('name', '?')}({args}): {fn.get('description', '')}")
        text = "\n".join(lines)
    return text


def render_first(observation: str, info: Mapping[str, Any], show: bool, limit: int) -> str:
    """The first user message: the goal (unless the observation holds it), the observation and,
    with ``show``, the offered actions."""
    goal = info.get("goal")
    first = observation
    if goal and isinstance(goal, str) and goal not in observation:
        first = f"Goal: {goal}\n\n{observation}"
    return with_actions(first, info, limit) if show else first


def episode_dialogue(tok: Any, env_id: str, info: Mapping[str, Any], native_tools: bool) -> Any:
    """The token renderer of an episode (the lm agent's, and its SFT data's): the system
    prompt and, when the chat template carries tools, the env's tools."""
    from budget_envs.integrations.trl.dialogue import _Dialogue

    kwargs: dict[str, Any] = {}
    tools = info.get("tools")
    if tools and native_tools:
        kwargs["tools"] = list(tools)
    return _Dialogue(tok, render_system(env_id, info, native_tools=native_tools), kwargs)


def next_text(observation: str, info: Mapping[str, Any], show: bool, limit: int) -> str:
    """A later user message: the observation and, with ``show``, the offered actions."""
    return with_actions(observation, info, limit) if show else observation


def load_lm(model: str, *, device: str = "cpu", dtype: str = "float32") -> tuple[Any, Any]:
    """``(model, tokenizer)`` of an ``lm:model=`` value, loaded from safetensors only.

    ``model`` is a prepared name (``smollm2-135m``), a transformers folder (what ``save_pretrained``,
    SFTTrainer or ``budgetmix train`` wrote), a LoRA adapter folder (``adapter_config.json``;
    merged into its base model), or a Hub id (offline: only from the local Hub cache).
    """
    from budget_envs._util import require
    from budget_envs.integrations.lm.models import resolve_model

    require("torch", "transformers", extra="lm", what="the lm agent")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = resolve_model(model)
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch dtype name such as 'float32', got {dtype!r}")
    folder = Path(where)
    adapter = folder / "adapter_config.json"
    if adapter.is_file() and not (folder / "config.json").is_file():
        require("peft", extra="lm", what="a LoRA adapter folder")
        from peft import PeftModel

        if not (folder / "adapter_model.safetensors").is_file():
            raise ValueError(
                f"{folder}: a LoRA adapter folder needs adapter_model.safetensors (other weight "
                "files are pickle, which can run code, and are not loaded)"
            )
        base_name = json.loads(adapter.read_text()).get("base_model_name_or_path")
        if not base_name:
            raise ValueError(f"{adapter} names no base model (base_model_name_or_path)")
        base = AutoModelForCausalLM.from_pretrained(
            resolve_model(base_name), dtype=torch_dtype, use_safetensors=True
        )
        net = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
        tok_dir = folder if (folder / "tokenizer_config.json").is_file() else base_name
        tok = AutoTokenizer.from_pretrained(resolve_model(str(tok_dir)))
    else:
        net = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype, use_safetensors=True)
        tok = AutoTokenizer.from_pretrained(where)
    net.to(device)
    net.eval()
    return net, tok


def _trained_show_actions(meta: Mapping[str, Any]) -> bool:
    """Whether a trained folder's prompts listed the offered actions (``--trainer sft`` keeps
    it in its settings, a GRPO run in its own record); True for any other model."""
    settings = meta.get("settings") if meta.get("trainer") == "sft" else meta
    value = (settings or {}).get("show_actions", True)
    return value if isinstance(value, bool) else True


class LMAgent:
    """A language model played in process (see the module docstring).

    Args:
        model: a prepared name (``budgetmix prepare model NAME``), a model or adapter folder, or
            a Hub id available offline.
        temperature: sampling temperature; 0 is greedy.
        top_p: nucleus sampling mass (1: off).
        max_tokens: the most tokens of one reply.
        show_actions: list the env's offered actions under every observation. None: what a
            trained folder's prompts did (its ``budgetmix_policy.json``), else true.
        max_actions: the most offered actions listed (the rest are counted).
        device: torch device (``cpu``, ``cuda``).
        dtype: torch dtype name of the weights (``float32``; ``bfloat16`` on a GPU).
        seed: seeds sampling, with each episode's seed and the turn.
        concurrency: live episodes per worker process, decoded together.
        keep_cache: keep each episode's KV cache between turns (False re-sends the whole
            conversation every turn).
        threads: torch CPU threads (None: torch's default).
        check_visibility: refuse an evaluation whose budget visibility differs from the one a
            trained folder records (``budgetmix_policy.json``).
        name: the agent's name in records (default ``lm:<model>``).
        actions: ``"generate"`` (write each reply), ``"score"`` or ``"score-mean"``: the reply
            is an offered action (every one in ``info["candidate_actions"]``, listed or not)
            drawn from the model's scores of them (summed, or averaged per token) at
            ``temperature`` (the highest at 0); a turn with nothing offered is written. None:
            what a trained folder records, else ``"generate"``.
    """

    def __init__(
        self,
        *,
        model: str = "smollm2-135m",
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_tokens: int = 64,
        show_actions: bool | None = None,
        max_actions: int = MAX_SHOWN_ACTIONS,
        device: str = "cpu",
        dtype: str = "float32",
        seed: int = 0,
        concurrency: int = 8,
        keep_cache: bool = True,
        threads: int | None = None,
        check_visibility: bool = True,
        name: str | None = None,
        actions: str | None = None,
    ) -> None:
        if not isinstance(model, (str, os.PathLike)) or not os.fspath(model):
            raise ValueError(f"model must be a prepared name or a folder, got {model!r}")
        for what, value in (("temperature", temperature), ("top_p", top_p)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{what} must be a number >= 0, got {value!r}")
        if not 0 < float(top_p) <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        for what, value, low in (
            ("max_tokens", max_tokens, 1),
            ("max_actions", max_actions, 1),
            ("seed", seed, 0),
            ("concurrency", concurrency, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{what} must be an int >= {low}, got {value!r}")
        for what, value in (
            ("show_actions", True if show_actions is None else show_actions),
            ("keep_cache", keep_cache),
            ("check_visibility", check_visibility),
        ):
            if not isinstance(value, bool):
                raise TypeError(f"{what} must be true or false, got {value!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)):
            raise ValueError(f"threads must be an int or None, got {threads!r}")
        if actions is not None:
            check_mode(actions)
        self.actions = actions
        self.model = os.fspath(model)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_tokens = max_tokens
        self.show_actions = show_actions
        self.max_actions = max_actions
        self.device = str(device)
        self.dtype = str(dtype)
        self.seed = seed
        self.concurrency = concurrency
        self.keep_cache = keep_cache
        self.threads = threads
        self.check_visibility = check_visibility
        self.name = name or f"lm:{Path(self.model).name}"
        self._net: Any = None
        self._tok: Any = None
        self._engine: BatchGenerator | None = None
        self._trained: dict[str, Any] = {}
        self._pending: list[tuple[asyncio.Future[Any], Request]] = []
        self._flush: asyncio.Task[None] | None = None
        self._current: LMEpisode | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_net=None, _tok=None, _engine=None, _pending=[], _flush=None, _current=None)
        return state

    # ------------------------------------------------------------------ the model
    def _load(self) -> None:
        if self._engine is not None:
            return
        import torch

        if self.threads:
            torch.set_num_threads(self.threads)
        self._net, self._tok = load_lm(self.model, device=self.device, dtype=self.dtype)
        eos = self._tok.eos_token_id
        eos_ids = {eos} if isinstance(eos, int) else set(eos or [])
        end = self._tok.convert_tokens_to_ids("<|im_end|>")
        if isinstance(end, int) and end != self._tok.unk_token_id:
            eos_ids.add(end)
        self._end_id = int(next(iter(eos_ids))) if isinstance(eos, (list, tuple)) else int(eos)
        self._engine = BatchGenerator(self._net, sorted(eos_ids), keep_cache=self.keep_cache)
        policy = Path(self.model) / "budgetmix_policy.json"
        if policy.is_file():
            self._trained = json.loads(policy.read_text(encoding="utf-8"))
        if self.actions is None:
            trained = self._trained.get("actions")
            self.actions = trained if trained in ACTION_MODES else "generate"
        if self.show_actions is None:
            self.show_actions = _trained_show_actions(self._trained)
        template = getattr(self._tok, "chat_template", None) or ""
        self._native_tools = "tools" in template
        config = self._net.config.get_text_config()
        self.max_context = int(getattr(config, "max_position_embeddings", 0) or 4096)

    @property
    def engine(self) -> BatchGenerator:
        self._load()
        if self._engine is None:  # pragma: no cover - _load sets it or raises
            raise AgentError(f"{self.name}: the model did not load")
        return self._engine

    def preflight(self) -> str:
        """Check the model can be found before any episode (the runner calls it): an unprepared
        name or a missing folder is one :class:`~budget_envs.errors.PreflightError` line."""
        from budget_envs.errors import PreflightError
        from budget_envs.integrations.lm.models import ModelPrepareError, resolve_model

        try:
            where = resolve_model(self.model)
        except ModelPrepareError as exc:
            raise PreflightError(f"{self.name}: {exc}") from None
        looks_like_path = os.sep in self.model or self.model.startswith(".")
        if looks_like_path and not Path(where).is_dir():
            raise PreflightError(f"{self.name}: no model folder at {self.model!r}")
        return where

    # ------------------------------------------------------------------ episodes
    def open_episode(
        self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int
    ) -> LMEpisode:
        """A new episode's conversation (the async driver opens one per live episode)."""
        self._load()
        if self.check_visibility and "visibility" in self._trained:
            from budget_envs.integrations.common import check_trained_visibility

            check_trained_visibility(self.name, self._trained["visibility"], info)
        return LMEpisode(self, env_id=env_id, observation=observation, info=info, seed=seed)

    async def _submit(self, episode: LMEpisode, request: Request) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((future, request))
        if self._flush is None or self._flush.done():
            self._flush = loop.create_task(self._gather_and_run())
        return await future

    async def _gather_and_run(self) -> None:
        """Wait until every live episode that is about to ask has asked, then decode them all
        together (at most ``concurrency`` a batch)."""
        while len(self._pending) < self.concurrency:
            seen = len(self._pending)
            for _ in range(4):  # episodes that just stepped their env reach act() by then
                await asyncio.sleep(0)
            if len(self._pending) == seen:
                break
        batch, self._pending = self._pending[: self.concurrency], self._pending[self.concurrency :]
        try:
            replies = self.engine.generate([req for _, req in batch])
        except Exception as exc:  # every waiting episode ends with the error, as a record
            for future, _ in batch:
                if not future.done():
                    future.set_exception(AgentError(f"{self.name}: generation failed: {exc}"))
        else:
            for (future, _), reply in zip(batch, replies):
                if not future.done():
                    future.set_result(reply)
        if self._pending:
            self._flush = asyncio.get_running_loop().create_task(self._gather_and_run())

    async def aclose(self) -> None:
        """Nothing to close (the model stays loaded for the next run of this process)."""

    # The synchronous Agent protocol: one episode, one call at a time.
    def reset(self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int) -> None:
        self._current = self.open_episode(
            env_id=env_id, observation=observation, info=info, seed=seed
        )

    def _episode(self) -> LMEpisode:
        if self._current is None:
            raise AgentError("LMAgent.act() before reset()")
        return self._current

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        episode = self._episode()
        request = episode.prepare(observation, info)
        if request is None:
            return episode.finish(None)
        return episode.finish(self.engine.generate([request])[0])

    def teacher_force(self, action: str, observation: str, info: Mapping[str, Any]) -> None:
        """Record an action chosen by someone else (the oracle prefix) and what followed."""
        self._episode().teacher_force(action, observation, info)

    def usage(self) -> dict[str, int]:
        """Token counts of the current episode."""
        return self._current.usage() if self._current is not None else {}

    def turn_log(self) -> list[dict[str, Any]]:
        return self._current.turn_log() if self._current is not None else []


class LMEpisode:
    """One episode's conversation: its chat rendering, token state and turn log."""

    def __init__(
        self,
        agent: LMAgent,
        *,
        env_id: str,
        observation: str,
        info: Mapping[str, Any],
        seed: int,
    ) -> None:
        self.agent = agent
        self.dialogue = episode_dialogue(agent._tok, env_id, info, agent._native_tools)
        first = render_first(observation, info, agent.show_actions, agent.max_actions)
        self.conv = Conversation(ids=self.dialogue.prompt_ids(first))
        self.seed = int(seed)
        self.turn = 0
        self._awaiting = False
        self._ended = True
        self._full = False
        self._new = len(self.conv.ids)
        self._log: list[dict[str, Any]] = []
        self._usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0}

    def _observe(self, observation: str, info: Mapping[str, Any]) -> None:
        text = next_text(observation, info, self.agent.show_actions, self.agent.max_actions)
        ids = self.dialogue.env_ids(text, reply_ended=self._ended)
        self.conv.ids.extend(ids)
        self._new = len(ids)

    def prepare(self, observation: str, info: Mapping[str, Any]) -> Request | None:
        """The request of this turn (None once the conversation is too long for the model)."""
        if self._awaiting:
            self._observe(observation, info)
        self._awaiting = True
        self.turn += 1
        agent = self.agent
        if self._full or len(self.conv.ids) + agent.max_tokens > agent.max_context:
            self._full = True
            self.conv.drop_cache()
            return None
        candidates = None
        offered = list(info.get("candidate_actions") or [])
        if agent.actions in SCORING_MODES and offered:
            room = agent.max_context - len(self.conv.ids)
            _, candidates = candidate_ids(agent._tok, offered, agent._end_id, room)
            if not candidates:
                self._full = True
                self.conv.drop_cache()
                return None
        return Request(
            self.conv,
            agent.max_tokens,
            seed=_seed(agent.seed, self.seed, self.turn),
            temperature=agent.temperature,
            top_p=agent.top_p,
            candidates=candidates,
            scoring=agent.actions if candidates else "score",
        )

    def finish(self, reply: Any) -> str:
        """The action of a reply (``None``: no reply, the context is full)."""
        entry: dict[str, Any] = {"turn": self.turn, "new_tokens": self._new}
        if reply is None:
            entry.update(invalid="context", action="", prefilled=0, completion_tokens=0)
            self._log.append(entry)
            return ""
        tok = self.agent._tok
        text = tok.decode(reply.ids, skip_special_tokens=True)
        self._ended = reply.ended
        self._usage["prompt_tokens"] += reply.prefilled
        self._usage["completion_tokens"] += len(reply.ids)
        self._usage["requests"] += 1
        if reply.ended or "\n" in text.strip():
            action = reply_action(text)
        else:
            action = ""  # cut inside its first line: nothing complete to act on
            entry["invalid"] = "length"
        entry.update(
            prefilled=reply.prefilled,
            completion_tokens=len(reply.ids),
            finish_reason="stop" if reply.ended else "length",
            reply=text,
            action=action,
        )
        self._log.append(entry)
        return action

    async def act(self, observation: str, info: Mapping[str, Any]) -> str:
        """The next action (the reply comes from the agent's next batch)."""
        request = self.prepare(observation, info)
        if request is None:
            return self.finish(None)
        return self.finish(await self.agent._submit(self, request))

    def teacher_force(self, action: str, observation: str, info: Mapping[str, Any]) -> None:
        """Append ``action`` as if the model had said it, then ``observation``."""
        if self._awaiting:
            raise AgentError("teacher_force() after act() needs the observation of that act first")
        tok = self.agent._tok
        ids = tok.encode(action, add_special_tokens=False)
        self.conv.ids.extend(ids + [self.agent._end_id])
        self._ended = True
        self._observe(observation, info)

    def usage(self) -> dict[str, int]:
        return dict(self._usage)

    def turn_log(self) -> list[dict[str, Any]]:
        return [dict(t) for t in self._log]
