"""The chat agent: any OpenAI-compatible ``/chat/completions`` endpoint, many requests in flight.

Serving engines (vLLM, SGLang, llama.cpp's server, ``transformers serve``, hosted APIs) batch:
they are fast only with many requests in flight. :class:`ChatAgent` is async at its core: the
runner's async driver (:mod:`budget_envs.eval.runner.concurrent`) opens one
:class:`ChatEpisode` per live episode and keeps ``concurrency`` of them waiting on the server
at once, over one pooled HTTP client per process. The same agent also works one call at a time
through the synchronous :class:`~budget_envs.eval.agents.Agent` protocol (``reset`` / ``act``),
which the single-step probes and :func:`~budget_envs.eval.runner.transcript` use.

Request building (:mod:`~budget_envs.eval.chat_request`: every request carries only the fields
the user set), the HTTP transport (:mod:`~budget_envs.eval.chat_http`: ``aiohttp``, retries) and
reply parsing (:mod:`~budget_envs.eval.chat_reply`) are modules of their own; :class:`ChatAgent`
mixes in the first two.

What a reply becomes:

* ``<think>...</think>`` (or a server's ``reasoning_content`` / ``reasoning`` field) is kept in
  the turn log, never in the action; the action is the first line after it.
* ``finish_reason == "length"`` (the reply was cut) is an invalid turn: the env gets an empty
  action (its feedback says so; the state is untouched) and the model is told why next turn.
* native tool calls become the env's tool-call action (``{"tool_calls": [...]}``).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from budget_envs._util import tool_calls_action
from budget_envs.errors import AgentError
from budget_envs.eval.chat_http import ChatTransport
from budget_envs.eval.chat_reply import _count, _Reply, split_reasoning
from budget_envs.eval.chat_request import _REASONING_MODEL, ChatRequests
from budget_envs.eval.prompts import DEFAULT_PROMPTS, system_prompt, with_actions

__all__ = ["ChatAgent", "ChatEpisode", "Clock", "split_reasoning"]

#: What the model is told after a reply the server cut at its token limit.
LENGTH_NOTE = (
    "(Your previous reply was cut off at the token limit before it gave an action, so nothing "
    "was done. Reply with one short action.)"
)


class Clock:
    """Wall time and sleeping, injectable so that retry schedules are tested without waiting."""

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass
class _Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    retries: int = 0


def _check_endpoint(base_url: Any, model: Any, api_key_env: Any) -> None:
    """:class:`ChatAgent`'s server arguments: an http(s) URL, a model name, a variable name."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
    if not isinstance(model, str) or not model:
        raise ValueError(f"model must be a non-empty string, got {model!r}")
    if not isinstance(api_key_env, str):
        raise TypeError(
            f"api_key_env must be the name of an environment variable, got {api_key_env!r}"
        )


def _check_counts(**values: Any) -> None:
    """Ints: ``retries`` and ``history`` >= 0, ``concurrency`` >= 1."""
    for what, value in values.items():
        low = 1 if what == "concurrency" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{what} must be an int >= {low}, got {value!r}")


def _check_limits(**values: Any) -> None:
    """Ints or None: the token limits >= 1, the ``seed`` >= 0."""
    for what, value in values.items():
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < (0 if what == "seed" else 1)
        ):
            raise ValueError(
                f"{what} must be an int >= {0 if what == 'seed' else 1} or None, got {value!r}"
            )


def _check_seconds(**values: Any) -> None:
    """Numbers >= 0 (the backoff and timeout seconds)."""
    for what, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{what} must be a number >= 0, got {value!r}")


def _check_sampling(**values: Any) -> None:
    """Numbers or None (the sampling fields)."""
    for what, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{what} must be a number or None, got {value!r}")


def _check_modes(
    stop: Any,
    reasoning_effort: Any,
    extra_body: Any,
    reasoning_model: Any,
    tools: Any,
    show_actions: Any,
) -> None:
    """:class:`ChatAgent`'s stop strings, extra fields and modes."""
    if stop is not None and not (
        isinstance(stop, str)
        or (isinstance(stop, Sequence) and all(isinstance(s, str) for s in stop))
    ):
        raise ValueError(f"stop must be a string or a list of strings, got {stop!r}")
    if reasoning_effort is not None and not isinstance(reasoning_effort, str):
        raise ValueError(
            f"reasoning_effort must be a string such as 'low', got {reasoning_effort!r}"
        )
    if extra_body is not None and not isinstance(extra_body, Mapping):
        raise ValueError(f"extra_body must be a JSON object, got {extra_body!r}")
    if reasoning_model not in ("auto", True, False):
        raise ValueError(f"reasoning_model must be 'auto', true or false, got {reasoning_model!r}")
    if tools not in ("auto", "never"):
        raise ValueError(f"tools must be 'auto' or 'never', got {tools!r}")
    if not isinstance(show_actions, bool):
        raise ValueError(f"show_actions must be true or false, got {show_actions!r}")


class ChatAgent(ChatRequests, ChatTransport):
    """An agent behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` and ``/models`` are
            appended).
        model: the model name sent in every request (the preflight checks the server has it).
        api_key_env: the name of the environment variable holding the API key ("" = no key).
        temperature, top_p, presence_penalty, frequency_penalty, stop, reasoning_effort,
            max_tokens, max_completion_tokens: sent only when set (None = the server's default).
            For OpenAI reasoning models (``reasoning_model``) the sampling fields are not sent
            and ``max_tokens`` is sent as ``max_completion_tokens``.
        seed: when set, every request carries a seed derived from it and the episode seed
            (distinct per episode, the same on every run), for servers with seeded sampling.
        extra_body: fields merged into every request as is (server-specific ones such as
            ``{"chat_template_kwargs": {"enable_thinking": false}}``); they win over the above.
        reasoning_model: ``"auto"`` (by the model name: ``o1``, ``o3``, ``o4-mini``, ``gpt-5``...),
            True or False.
        retries: extra attempts after a failed request (connection error, timeout, HTTP 429 or
            5xx, a malformed body); then :class:`AgentError`.
        backoff, max_backoff: the wait before retry n is ``backoff * 2**(n-1)`` capped at
            ``max_backoff``, with jitter (between half and all of it); a ``Retry-After`` header
            is honoured instead (capped at ``max_backoff`` too).
        timeout: seconds per request.
        history: how many past (action, observation) exchanges to send besides the first one.
        prompts: system prompts keyed by family name (a registry row's ``family``) or by id,
            plus ``"default"``; they win over the rows' own prompts.
        tools: ``"auto"`` sends ``info["tools"]`` as native tools when the env provides them;
            ``"never"`` does not.
        concurrency: requests in flight per process in the async driver (live episodes); the
            default keeps a batching server busy.
        show_actions: list the env's offered actions (``info["candidate_actions"]``) under every
            observation, as published ALFWorld and WebShop agent prompts do.
        clock: wall time and sleeping (tests inject one); default the real ones.
        name: the agent's name in records (default ``chat:MODEL``).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float | None = None,
        top_p: float | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        reasoning_effort: str | None = None,
        max_tokens: int | None = None,
        max_completion_tokens: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        reasoning_model: bool | str = "auto",
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 60.0,
        timeout: float = 60.0,
        history: int = 20,
        prompts: Mapping[str, str] | None = None,
        tools: str = "auto",
        concurrency: int = 64,
        show_actions: bool = False,
        clock: Clock | None = None,
        name: str | None = None,
    ) -> None:
        _check_endpoint(base_url, model, api_key_env)
        _check_counts(retries=retries, history=history, concurrency=concurrency)
        _check_limits(max_tokens=max_tokens, max_completion_tokens=max_completion_tokens, seed=seed)
        _check_seconds(backoff=backoff, max_backoff=max_backoff, timeout=timeout)
        _check_sampling(
            temperature=temperature,
            top_p=top_p,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
        )
        _check_modes(stop, reasoning_effort, extra_body, reasoning_model, tools, show_actions)
        self.show_actions = show_actions
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.top_p = top_p
        self.presence_penalty = presence_penalty
        self.frequency_penalty = frequency_penalty
        self.stop = stop if stop is None or isinstance(stop, str) else list(stop)
        self.seed = seed
        self.reasoning_effort = reasoning_effort
        self.max_tokens = max_tokens
        self.max_completion_tokens = max_completion_tokens
        self.extra_body = dict(extra_body or {})
        self.reasoning_model = (
            bool(_REASONING_MODEL.match(model)) if reasoning_model == "auto" else reasoning_model
        )
        self.retries = retries
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.timeout = float(timeout)
        self.history = history
        self.prompts = {**DEFAULT_PROMPTS, **(prompts or {})}
        self.tools = tools
        self.concurrency = concurrency
        self.clock = clock or Clock()
        self.name = name or f"chat:{model}"
        self._jitter = random.Random(f"chat-jitter:{seed or 0}")
        self._sessions: dict[int, Any] = {}  # id(event loop) -> aiohttp.ClientSession
        self._loop: asyncio.AbstractEventLoop | None = None  # the sync path's own loop
        self._current: ChatEpisode | None = None
        self._warned_sampling = False

    # -- state that does not pickle (worker processes build their own client and loop)
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_sessions"] = {}
        state["_loop"] = None
        state["_current"] = None
        return state

    # ------------------------------------------------------------------ episodes
    def open_episode(
        self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int
    ) -> ChatEpisode:
        """A new episode's conversation (the async driver opens one per live episode)."""
        return ChatEpisode(self, env_id=env_id, observation=observation, info=info, seed=seed)

    # The synchronous Agent protocol: one episode at a time, one request at a time.
    def reset(self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int) -> None:
        self._current = self.open_episode(
            env_id=env_id, observation=observation, info=info, seed=seed
        )

    def _episode(self) -> ChatEpisode:
        if self._current is None:
            raise AgentError("ChatAgent.act() before reset()")
        return self._current

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        return self._run(self._episode().act(observation, info))

    def teacher_force(self, action: str, observation: str, info: Mapping[str, Any]) -> None:
        """Record an action chosen by someone else (the oracle prefix) and what followed."""
        self._episode().teacher_force(action, observation, info)

    def usage(self) -> dict[str, int]:
        """Token counts of the current episode."""
        return self._episode().usage() if self._current is not None else dict(_Usage().__dict__)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The current episode's conversation so far (system prompt first)."""
        return self._episode().messages

    def turn_log(self) -> list[dict[str, Any]]:
        """Per-turn details of the current episode (see :meth:`ChatEpisode.turn_log`)."""
        return self._episode().turn_log() if self._current is not None else []


class ChatEpisode:
    """One episode's conversation with the server: its messages, token counts and turn log."""

    def __init__(
        self,
        agent: ChatAgent,
        *,
        env_id: str,
        observation: str,
        info: Mapping[str, Any],
        seed: int,
    ) -> None:
        self.agent = agent
        system = system_prompt(env_id, info, agent.prompts)
        goal = info.get("goal")
        first = observation if not goal or goal in observation else f"Goal: {goal}\n\n{observation}"
        if agent.show_actions:
            first = with_actions(first, info)
        self._messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": first},
        ]
        self._head = 2
        self._seed = int(seed)
        self._usage = _Usage()
        self._turns: list[dict[str, Any]] = []
        self._pending_ids: list[str] = []
        self._awaiting = False
        self._cut = False
        self._tool_schema = info.get("tools") if agent.tools == "auto" else None

    def _window(self) -> list[dict[str, Any]]:
        head, rest = self._messages[: self._head], self._messages[self._head :]
        if self.agent.history == 0:
            rest = rest[-1:] if rest else []
        else:
            # Cut at an assistant message so tool results never lose their call.
            cut = len(rest)
            exchanges = 0
            for i in range(len(rest) - 1, -1, -1):
                if rest[i]["role"] == "assistant":
                    exchanges += 1
                    cut = i
                    if exchanges == self.agent.history:
                        break
            rest = rest[cut:] if exchanges else rest
        return head + rest

    def _add_observation(self, observation: str, info: Mapping[str, Any]) -> None:
        if self.agent.show_actions:
            observation = with_actions(observation, info)
        if self._cut:
            observation = f"{LENGTH_NOTE}\n{observation}"
            self._cut = False
        if self._pending_ids:
            for i, call_id in enumerate(self._pending_ids):
                content = observation if i == 0 else "(see the previous tool result)"
                self._messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
            self._pending_ids = []
        else:
            self._messages.append({"role": "user", "content": observation})

    async def act(self, observation: str, info: Mapping[str, Any]) -> str:
        """The next action for ``observation`` (one request, retried as configured)."""
        if self._awaiting:
            self._add_observation(observation, info)
        self._awaiting = True
        body = self.agent.payload(self._window(), self._tool_schema, self._seed)
        reply = await self.agent.complete(body)
        return self._take(reply)

    def _take(self, reply: _Reply) -> str:
        usage = reply.usage if isinstance(reply.usage, dict) else {}
        prompt = _count(usage.get("prompt_tokens"))
        completion = _count(usage.get("completion_tokens"))
        self._usage.requests += 1
        self._usage.retries += reply.retries
        self._usage.prompt_tokens += prompt
        self._usage.completion_tokens += completion
        message = reply.message
        content, reasoning = split_reasoning(message.get("content"))
        served = message.get("reasoning_content") or message.get("reasoning")
        if served and not isinstance(served, str):
            served = json.dumps(served, default=repr)
        if served:
            reasoning = served if reasoning is None else f"{served}\n{reasoning}"
        details = usage.get("completion_tokens_details")
        details = details if isinstance(details, dict) else {}
        entry: dict[str, Any] = {
            "finish_reason": reply.finish_reason,
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "reasoning": reasoning,
            "reasoning_tokens": details.get("reasoning_tokens"),
            "retries": reply.retries,
        }
        calls = message.get("tool_calls") or []
        if reply.finish_reason == "length":
            # A cut reply is an invalid turn: the env answers the empty action with feedback.
            self._messages.append({"role": "assistant", "content": content})
            self._cut = True
            action = ""
            entry["invalid"] = "length"
        elif calls:
            action = self._tool_calls(content, calls)
        else:
            self._messages.append({"role": "assistant", "content": content})
            # Models often wrap the action in quotes or add a second line; keep the first line.
            action = content.splitlines()[0].strip().strip("`").strip() if content else ""
        entry["action"] = action
        self._turns.append(entry)
        return action

    def _tool_calls(self, content: str, calls: list[dict[str, Any]]) -> str:
        parsed, ids, sent = [], [], []
        for n, call in enumerate(calls):
            fn = call.get("function") or {}
            raw = fn.get("arguments")
            try:
                args = json.loads(raw) if isinstance(raw, str) else (raw or {})
            except ValueError:
                args = raw  # the env answers broken JSON with feedback, as a turn
            call_id = call.get("id") or f"call_{len(self._messages)}_{n}"
            parsed.append((fn.get("name", ""), args))
            ids.append(call_id)
            arguments = raw if isinstance(raw, str) else json.dumps(raw or {})
            sent.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": fn.get("name", ""), "arguments": arguments},
                }
            )
        self._messages.append({"role": "assistant", "content": content or None, "tool_calls": sent})
        self._pending_ids = ids
        return tool_calls_action(parsed)

    def teacher_force(self, action: str, observation: str, info: Mapping[str, Any]) -> None:
        """Record an action chosen by someone else (the oracle prefix) and what followed."""
        if self._awaiting:
            raise AgentError("teacher_force() after act() needs the observation of that act first")
        self._messages.append({"role": "assistant", "content": action})
        if self.agent.show_actions:
            observation = with_actions(observation, info)
        self._messages.append({"role": "user", "content": observation})

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far (system prompt first)."""
        return [dict(m) for m in self._messages]

    def usage(self) -> dict[str, int]:
        """Token counts of this episode."""
        return {
            "prompt_tokens": self._usage.prompt_tokens,
            "completion_tokens": self._usage.completion_tokens,
            "requests": self._usage.requests,
            "retries": self._usage.retries,
        }

    def turn_log(self) -> list[dict[str, Any]]:
        """One dict per request: ``finish_reason``, ``prompt_tokens``, ``completion_tokens``,
        ``reasoning`` (the stripped thinking, or None), ``reasoning_tokens`` (when the server
        reports it), ``retries``, ``action``, and ``invalid: "length"`` on a cut reply."""
        return [dict(t) for t in self._turns]
