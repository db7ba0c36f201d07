"""The chat agent: any OpenAI-compatible ``/chat/completions`` endpoint, many requests in flight.

Serving engines (vLLM, SGLang, llama.cpp's server, ``transformers serve``, hosted APIs) batch:
they are fast only with many requests in flight. :class:`ChatAgent` is async at its core: the
runner's async driver (:mod:`budget_envs.eval.runner.concurrent`) opens one
:class:`ChatEpisode` per live episode and keeps ``concurrency`` of them waiting on the server
at once, over one pooled HTTP client per process. The same agent also works one call at a time
through the synchronous :class:`~budget_envs.eval.agents.Agent` protocol (``reset`` / ``act``),
which the single-step probes and :func:`~budget_envs.eval.runner.transcript` use.

The HTTP client is ``aiohttp``: of the async clients it spends the least CPU per request (see
``docs/llm-agents.md``), which is what bounds a driver that keeps a batching server busy. The
JSON it sends is built here, so every request carries only the fields the user set.

What a reply becomes:

* ``<think>...</think>`` (or a server's ``reasoning_content`` / ``reasoning`` field) is kept in
  the turn log, never in the action; the action is the first line after it.
* ``finish_reason == "length"`` (the reply was cut) is an invalid turn: the env gets an empty
  action (its feedback says so; the state is untouched) and the model is told why next turn.
* native tool calls become the env's tool-call action (``{"tool_calls": [...]}``).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import os
import random
import re
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from budget_envs._util import require, tool_calls_action
from budget_envs.errors import AgentError, PreflightError
from budget_envs.eval.prompts import DEFAULT_PROMPTS, system_prompt, with_actions

__all__ = ["ChatAgent", "ChatEpisode", "Clock", "split_reasoning"]

logger = logging.getLogger(__name__)

#: OpenAI's reasoning models (o1, o3, o4-mini, gpt-5...): ``max_completion_tokens``, no sampling.
_REASONING_MODEL = re.compile(r"^(?:.*/)?(?:o\d(?:[-.].*)?|gpt-5.*)$")
#: Sampling fields a reasoning model rejects.
_SAMPLING = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
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


def split_reasoning(text: str | None) -> tuple[str, str | None]:
    """``(answer, reasoning)`` of a reply that may hold a ``<think>...</think>`` block.

    A reply without the opening tag but with a closing one (templates that open the block in
    the prompt) has everything before ``</think>`` as reasoning; an unclosed block is all
    reasoning (the answer is empty).

    >>> split_reasoning("<think>the key is east</think>\\ngo east")
    ('go east', 'the key is east')
    >>> split_reasoning("go east")
    ('go east', None)
    """
    if not text:
        return "", None
    stripped = text.lstrip()
    if stripped.startswith("<think>"):
        body = stripped[len("<think>") :]
        thought, closed, rest = body.partition("</think>")
        if not closed:
            return "", thought.strip()
        return rest.strip(), thought.strip()
    head, closed, rest = text.partition("</think>")
    if closed:
        return rest.strip(), head.strip()
    return text.strip(), None


def _count(value: Any) -> int:
    """A token count from a reply's ``usage`` (0 when a server sends something else)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return 0


def _message_problem(message: Any) -> str | None:
    """What is wrong with a reply's assistant message, or None when it is usable (an endpoint
    answering garbage ends the episode as one :class:`AgentError`, never as an exception from
    deep inside the agent)."""
    if not isinstance(message, dict):
        return "choices[0].message is not an object"
    if not isinstance(message.get("content"), (str, type(None))):
        return "message content is not text"
    calls = message.get("tool_calls")
    if not isinstance(calls, (list, type(None))) or not all(
        isinstance(c, dict) and isinstance(c.get("function", {}), dict) for c in calls or []
    ):
        return "tool_calls is not a list of call objects"
    return None


def _retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


@dataclass
class _Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    retries: int = 0


@dataclass
class _Reply:
    message: dict[str, Any]
    finish_reason: str | None
    usage: dict[str, Any] = field(default_factory=dict)
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


class ChatAgent:
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

    # ------------------------------------------------------------------ requests
    def payload(
        self, messages: list[dict[str, Any]], tools: Any, episode_seed: int
    ) -> dict[str, Any]:
        """The request body: the model, the messages, the tools, and only the fields set."""
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = list(tools)
        sampling = {k: getattr(self, k) for k in _SAMPLING if getattr(self, k) is not None}
        if self.reasoning_model:
            if sampling and not self._warned_sampling:
                self._warned_sampling = True
                logger.warning(
                    "%s is a reasoning model: not sending %s", self.model, ", ".join(sampling)
                )
            limit = self.max_completion_tokens or self.max_tokens
            if limit is not None:
                body["max_completion_tokens"] = limit
        else:
            body.update(sampling)
            if self.max_tokens is not None:
                body["max_tokens"] = self.max_tokens
            if self.max_completion_tokens is not None:
                body["max_completion_tokens"] = self.max_completion_tokens
        if self.stop is not None:
            body["stop"] = self.stop
        if self.reasoning_effort is not None:
            body["reasoning_effort"] = self.reasoning_effort
        if self.seed is not None:
            body["seed"] = (self.seed * 1_000_003 + int(episode_seed)) % (2**31)
        body.update(self.extra_body)
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _session(self) -> Any:
        """The pooled client of the running event loop (one per loop, built on first use)."""
        require("aiohttp", extra="chat", what="the chat agent")
        import aiohttp

        loop = asyncio.get_running_loop()
        session = self._sessions.get(id(loop))
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
            session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                json_serialize=json.dumps,
            )
            self._sessions[id(loop)] = session
        return session

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff)
        base = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
        return base / 2 + self._jitter.uniform(0, base / 2)

    async def complete(self, body: dict[str, Any]) -> _Reply:
        """POST ``body`` to ``/chat/completions``, with retries; the first choice's message."""
        import aiohttp

        session = self._session()
        url = f"{self.base_url}/chat/completions"
        headers = self._headers()
        last = "no attempt"
        wait: float | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await self.clock.sleep(self._delay(attempt, wait))
            wait = None
            try:
                async with session.post(url, json=body, headers=headers) as resp:
                    status = resp.status
                    raw = await resp.read()
                    if status == 429 or status >= 500:
                        wait = _retry_after(resp.headers.get("Retry-After"), self.clock.time())
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                logger.warning("chat request failed (attempt %d): %s", attempt + 1, last)
                continue
            text = raw.decode("utf-8", "replace")
            if status == 429 or status >= 500:
                last = f"HTTP {status}: {text[:200]}"
                logger.warning("chat request failed (attempt %d): %s", attempt + 1, last)
                continue
            if status >= 400:
                raise AgentError(f"{url} rejected the request: HTTP {status}: {text[:500]}")
            try:
                data = json.loads(text)
                choice = data["choices"][0]
                message = choice["message"]
            except (ValueError, KeyError, IndexError, TypeError):
                last = f"malformed chat completion: {text[:200]!r}"
                continue
            problem = _message_problem(message)
            if problem is not None:
                last = f"malformed chat completion ({problem}): {text[:200]!r}"
                continue
            return _Reply(
                message=message,
                finish_reason=choice.get("finish_reason"),
                usage=data.get("usage") or {},
                retries=attempt,
            )
        raise AgentError(f"{url} failed after {self.retries + 1} attempts; last error: {last}")

    # ------------------------------------------------------------------ preflight
    async def apreflight(self) -> list[str]:
        """``GET {base_url}/models``: the server answers, takes the key and serves the model.

        Returns the served model ids; raises :class:`PreflightError` with a one-line message.
        """
        import aiohttp

        session = self._session()
        url = f"{self.base_url}/models"
        try:
            async with session.get(url, headers=self._headers()) as resp:
                status = resp.status
                text = (await resp.read()).decode("utf-8", "replace")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            raise PreflightError(
                f"{self.name}: no OpenAI-compatible server answers at {self.base_url} ({reason})"
            ) from None
        if status in (401, 403):
            where = f"${self.api_key_env}" if self.api_key_env else "no key (api_key_env is empty)"
            raise PreflightError(
                f"{self.name}: {url} refused the API key from {where} (HTTP {status})"
            )
        if status >= 400:
            raise PreflightError(
                f"{self.name}: {url} answered HTTP {status}: {' '.join(text.split())[:200]}"
            )
        try:
            served = [str(m["id"]) for m in json.loads(text)["data"]]
        except (ValueError, KeyError, TypeError):
            raise PreflightError(
                f"{self.name}: {url} is not an OpenAI-compatible model list: "
                f"{' '.join(text.split())[:200]!r}"
            ) from None
        if self.model not in served:
            raise PreflightError(
                f"{self.name}: model {self.model!r} is not served at {self.base_url}; it serves "
                + (", ".join(repr(m) for m in served[:10]) or "no model")
            )
        return served

    def preflight(self) -> list[str]:
        """:meth:`apreflight` from synchronous code."""
        return self._run(self.apreflight())

    async def aclose(self) -> None:
        """Close the client of the running loop."""
        session = self._sessions.pop(id(asyncio.get_running_loop()), None)
        if session is not None:
            await session.close()

    def close(self) -> None:
        """Close the synchronous path's client and loop."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.run_until_complete(self.aclose())
            self._loop.close()
        self._loop = None

    def _run(self, coro: Awaitable[Any]) -> Any:
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

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
