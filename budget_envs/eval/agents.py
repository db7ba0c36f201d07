"""Agents for the evaluation harness: the :class:`Agent` protocol and the reference agents.

* :class:`RandomAgent` - a seeded uniform choice among the admissible actions (the floor);
* :class:`OracleAgent` - follows the env's oracle with probability ``1 - epsilon`` (the ceiling,
  and with ``epsilon > 0`` a known-ground-truth agent that makes mistakes and must recover);
* :class:`ChatAgent` - any OpenAI-compatible chat-completions endpoint over HTTP (vLLM, SGLang,
  llama.cpp's server, hosted APIs), with native tool calls for tool-use envs.

Agents never see the budget unless the env shows it in the observation: the runner removes
``info["budget"]`` for budget-hidden runs, which is what makes the single-run derivation valid.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from budget_envs._util import tool_call_action, tool_calls_action
from budget_envs.errors import AgentError

__all__ = [
    "Agent",
    "AgentError",
    "ChatAgent",
    "DEFAULT_PROMPTS",
    "OracleAgent",
    "RandomAgent",
    "make_agent",
    "system_prompt",
    "tool_call_action",
]

logger = logging.getLogger(__name__)


@runtime_checkable
class Agent(Protocol):
    """What the runner needs from an agent.

    ``reset`` starts an episode (``seed`` makes any sampling reproducible); ``act`` returns the
    next action for the observation. Optional methods the runner uses when present:

    * ``bind_oracle(fn)``: ``fn()`` returns the current oracle actions (for oracle-driven agents);
    * ``teacher_force(action, observation, info)``: an action chosen by someone else ran (the
      oracle prefix of a single-step probe); keep it in the history as if the agent had chosen it;
    * ``usage()``: a dict of token counts for this episode.
    """

    name: str

    def reset(self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int) -> None:
        """Start an episode."""

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        """The next action."""


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    return seed


class RandomAgent:
    """Uniform over ``info["admissible_actions"]``; for tool use, a call with empty arguments."""

    def __init__(self, *, seed: int = 0, name: str = "random") -> None:
        self.seed = _check_seed(seed)
        self.name = name
        self._rng = random.Random(seed)

    def reset(self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int) -> None:
        # One stream per (agent seed, episode seed): identical in any process.
        self._rng = random.Random(f"{self.seed}:{int(seed)}")

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        options = list(info.get("admissible_actions") or [])
        if not options:
            return "look"
        choice = options[self._rng.randrange(len(options))]
        if info.get("tools"):
            return tool_call_action(choice, {})
        return choice


class OracleAgent:
    """Follows the oracle with probability ``1 - epsilon``; otherwise a random admissible action.

    The oracle comes from the runner (``bind_oracle``), which shares one oracle call per turn
    between the agent and the agreement bookkeeping. Among several optimal actions it picks one
    with its seeded generator (``tie_break="random"``) or the first one (``"first"``).
    """

    def __init__(
        self,
        *,
        epsilon: float = 0.0,
        seed: int = 0,
        tie_break: str = "random",
        name: str | None = None,
    ) -> None:
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)):
            raise TypeError(f"epsilon must be a number in [0, 1], got {epsilon!r}")
        if not 0.0 <= float(epsilon) <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon!r}")
        if tie_break not in ("random", "first"):
            raise ValueError(f"tie_break must be 'random' or 'first', got {tie_break!r}")
        self.tie_break = tie_break
        self.epsilon = float(epsilon)
        self.seed = _check_seed(seed)
        self.name = name or (f"oracle-eps{self.epsilon:g}" if self.epsilon else "oracle")
        self._rng = random.Random(seed)
        self._oracle: Callable[[], list[str]] | None = None
        self._random = RandomAgent(seed=seed)

    def bind_oracle(self, fn: Callable[[], list[str]]) -> None:
        """Use ``fn()`` for the current oracle actions."""
        self._oracle = fn

    def reset(self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int) -> None:
        self._rng = random.Random(f"{self.seed}:{int(seed)}")
        self._random.reset(env_id=env_id, observation=observation, info=info, seed=seed)

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        if self._oracle is None:
            raise AgentError("OracleAgent needs bind_oracle() (the runner calls it)")
        # Draw the coin every turn, so epsilon=0 and epsilon>0 share the same stream layout.
        explore = self._rng.random() < self.epsilon
        if not explore:
            best = self._oracle()
            if best:
                if len(best) == 1 or self.tie_break == "first":
                    return best[0]
                return best[self._rng.randrange(len(best))]
        return self._random.act(observation, info)


# ---------------------------------------------------------------------- chat agent
#: The system prompt of an env whose registry row has none. A family's own prompt is on its
#: registry row (``EnvEntry.prompt``); ``ChatAgent(prompts=...)`` overrides both per family.
DEFAULT_PROMPTS: dict[str, str] = {
    "default": (
        "You are an agent in a text environment. Each message is what you observe. Reply with "
        "exactly one action as plain text, nothing else."
    ),
}


def system_prompt(env_id: str, info: Mapping[str, Any], prompts: Mapping[str, str]) -> str:
    """The system prompt for an episode of ``env_id`` starting with ``info``.

    In order: ``prompts[<the row's family>]``, ``prompts[env_id]``, the registry row's own
    prompt, ``prompts["default"]``. An id that is not registered gets the default prompt.
    """
    from gymnasium.error import NameNotFound

    from budget_envs.registry import entry_for

    default = prompts.get("default", DEFAULT_PROMPTS["default"])
    try:
        entry = entry_for(env_id)
    except NameNotFound:  # an env that is not a registry row (a user's own id)
        return prompts.get(env_id, default)
    for key in (entry.family, env_id):
        if key in prompts:
            return prompts[key]
    return entry.chat_prompt(info) or default


def _reply_message(data: Any) -> dict[str, Any]:
    """The assistant message of a chat completion, or :class:`AgentError` naming what is wrong
    with a reply of the wrong shape (an endpoint answering garbage ends the episode as an error,
    never as an exception from deep inside the agent)."""
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        message = None
    problem = None
    if not isinstance(message, dict):
        problem = "no choices[0].message object"
    elif not isinstance(message.get("content"), (str, type(None))):
        problem = "message content is not text"
    elif not isinstance(message.get("tool_calls"), (list, type(None))) or not all(
        isinstance(c, dict) and isinstance(c.get("function", {}), dict)
        for c in message.get("tool_calls") or []
    ):
        problem = "tool_calls is not a list of call objects"
    if problem is not None:
        text = json.dumps(data, default=repr)
        raise AgentError(f"malformed chat completion ({problem}): {text[:300]}")
    return message


@dataclass
class _Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    retries: int = 0


class ChatAgent:
    """An agent behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended).
        model: the model name sent in every request.
        api_key_env: the name of the environment variable holding the API key ("" = no key).
        temperature, max_tokens: sampling settings sent in every request.
        retries: extra attempts after a failed request (connection error, timeout, HTTP 429 or
            5xx), with exponential backoff ``backoff * 2**attempt`` seconds; then
            :class:`AgentError`.
        timeout: seconds per request.
        history: how many past (action, observation) exchanges to send besides the first one.
        prompts: system prompts keyed by family name (a registry row's ``family``) or by id,
            plus ``"default"``; they win over the rows' own prompts (see :func:`system_prompt`).
        tools: ``"auto"`` sends ``info["tools"]`` as native tools when the env provides them.
        seed: sent as the request's ``seed`` (combined with the episode seed) for servers that
            support seeded sampling.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 256,
        retries: int = 3,
        backoff: float = 0.5,
        timeout: float = 60.0,
        history: int = 20,
        prompts: Mapping[str, str] | None = None,
        tools: str = "auto",
        seed: int = 0,
        name: str | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        if not isinstance(api_key_env, str):
            raise TypeError(
                f"api_key_env must be the name of an environment variable, got {api_key_env!r}"
            )
        for what, value, low in (
            ("retries", retries, 0),
            ("history", history, 0),
            ("max_tokens", max_tokens, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{what} must be an int >= {low}, got {value!r}")
        for what, value in (
            ("temperature", temperature),
            ("backoff", backoff),
            ("timeout", timeout),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{what} must be a number >= 0, got {value!r}")
        if tools not in ("auto", "never"):
            raise ValueError(f"tools must be 'auto' or 'never', got {tools!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.temperature = float(temperature)
        self.max_tokens = max_tokens
        self.retries = retries
        self.backoff = float(backoff)
        self.timeout = float(timeout)
        self.history = history
        self.prompts = {**DEFAULT_PROMPTS, **(prompts or {})}
        self.tools = tools
        self.seed = _check_seed(seed)
        self.name = name or f"chat:{model}"
        self._session: Any = None
        self._messages: list[dict[str, Any]] = []
        self._head = 0
        self._episode_seed = 0
        self._usage = _Usage()
        self._pending_ids: list[str] = []
        self._awaiting = False
        self._tool_schema: Any = None

    # -- state that does not pickle (worker processes build their own session)
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_session"] = None
        return state

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        import requests

        if self._session is None:
            self._session = requests.Session()
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        url = f"{self.base_url}/chat/completions"
        last = "no attempt"
        for attempt in range(self.retries + 1):
            if attempt:
                self._usage.retries += 1
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                resp = self._session.post(url, json=payload, headers=headers, timeout=self.timeout)
            except (requests.ConnectionError, requests.Timeout) as exc:
                last = f"{type(exc).__name__}: {exc}"
                logger.warning("chat request failed (attempt %d): %s", attempt + 1, last)
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                logger.warning("chat request failed (attempt %d): %s", attempt + 1, last)
                continue
            if resp.status_code >= 400:
                raise AgentError(
                    f"{url} rejected the request: HTTP {resp.status_code}: {resp.text[:500]}"
                )
            try:
                return resp.json()
            except ValueError:
                last = f"unparseable response: {resp.text[:200]!r}"
                continue
        raise AgentError(f"{url} failed after {self.retries + 1} attempts; last error: {last}")

    def reset(self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int) -> None:
        system = system_prompt(env_id, info, self.prompts)
        goal = info.get("goal")
        first = observation if not goal or goal in observation else f"Goal: {goal}\n\n{observation}"
        self._messages = [{"role": "system", "content": system}, {"role": "user", "content": first}]
        self._head = 2
        self._episode_seed = int(seed)
        self._usage = _Usage()
        self._pending_ids = []
        self._awaiting = False
        self._tool_schema = info.get("tools") if self.tools == "auto" else None

    def _window(self) -> list[dict[str, Any]]:
        head, rest = self._messages[: self._head], self._messages[self._head :]
        if self.history == 0:
            rest = rest[-1:] if rest else []
        else:
            # Cut at an assistant message so tool results never lose their call.
            cut = len(rest)
            exchanges = 0
            for i in range(len(rest) - 1, -1, -1):
                if rest[i]["role"] == "assistant":
                    exchanges += 1
                    cut = i
                    if exchanges == self.history:
                        break
            rest = rest[cut:] if exchanges else rest
        return head + rest

    def _add_observation(self, observation: str) -> None:
        if self._pending_ids:
            for i, call_id in enumerate(self._pending_ids):
                content = observation if i == 0 else "(see the previous tool result)"
                self._messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
            self._pending_ids = []
        else:
            self._messages.append({"role": "user", "content": observation})

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        if self._awaiting:
            self._add_observation(observation)
        self._awaiting = True
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": self._window(),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": (self.seed * 1_000_003 + self._episode_seed) % (2**31),
        }
        if self._tool_schema:
            payload["tools"] = list(self._tool_schema)
        data = self._post(payload)
        self._usage.requests += 1
        message = _reply_message(data)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        for key in ("prompt_tokens", "completion_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                setattr(self._usage, key, getattr(self._usage, key) + value)
        calls = message.get("tool_calls") or []
        if calls:
            parsed = []
            ids = []
            for n, call in enumerate(calls):
                fn = call.get("function") or {}
                raw = fn.get("arguments")
                try:
                    args = json.loads(raw) if isinstance(raw, str) else (raw or {})
                except ValueError:
                    args = raw  # the env answers broken JSON with feedback, as a turn
                parsed.append((fn.get("name", ""), args))
                ids.append(call.get("id") or f"call_{len(self._messages)}_{n}")
            self._messages.append(
                {
                    "role": "assistant",
                    "content": message.get("content"),
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {
                                "name": c.get("function", {}).get("name", ""),
                                "arguments": c.get("function", {}).get("arguments", "{}"),
                            },
                        }
                        for i, c in zip(ids, calls)
                    ],
                }
            )
            self._pending_ids = ids
            return tool_calls_action(parsed)
        text = (message.get("content") or "").strip()
        self._messages.append({"role": "assistant", "content": text})
        # Models often wrap the action in quotes or add a second line; keep the first line.
        action = text.splitlines()[0].strip().strip("`").strip() if text else ""
        return action

    def teacher_force(self, action: str, observation: str, info: Mapping[str, Any]) -> None:
        """Record an action chosen by someone else (the oracle prefix) and what followed."""
        if self._awaiting:
            raise AgentError("teacher_force() after act() needs the observation of that act first")
        self._messages.append({"role": "assistant", "content": action})
        self._messages.append({"role": "user", "content": observation})

    def usage(self) -> dict[str, int]:
        """Token counts of the current episode."""
        return {
            "prompt_tokens": self._usage.prompt_tokens,
            "completion_tokens": self._usage.completion_tokens,
            "requests": self._usage.requests,
            "retries": self._usage.retries,
        }


# ---------------------------------------------------------------------- specs
def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def make_agent(spec: str, *, seed: int = 0) -> Any:
    """Build an agent from a CLI spec: ``random``, ``oracle``, ``oracle:epsilon=0.3``,
    ``chat:base_url=http://127.0.0.1:8000/v1,model=qwen,temperature=0.7``.

    The values are JSON when they parse as JSON, else strings.
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"agent spec must be a non-empty string, got {spec!r}")
    kind, _, rest = spec.partition(":")
    kwargs: dict[str, Any] = {}
    if rest:
        for part in rest.split(","):
            key, eq, value = part.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"agent spec {spec!r}: expected key=value, got {part!r}")
            kwargs[key.strip().replace("-", "_")] = _parse_value(value.strip())
    if "eps" in kwargs:
        kwargs["epsilon"] = kwargs.pop("eps")
    kwargs.setdefault("seed", seed)
    builders = {"random": RandomAgent, "oracle": OracleAgent, "chat": ChatAgent}
    if kind not in builders:
        raise ValueError(
            f"unknown agent kind {kind!r} in {spec!r}; expected one of {sorted(builders)}"
        )
    try:
        return builders[kind](**kwargs)
    except TypeError as exc:
        raise ValueError(f"agent spec {spec!r}: {exc}") from None
