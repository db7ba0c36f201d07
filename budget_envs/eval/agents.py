"""Agents for the evaluation harness: the :class:`Agent` protocol and the reference agents.

* :class:`RandomAgent` - a seeded uniform choice among the admissible actions (the floor);
* :class:`OracleAgent` - follows the env's oracle with probability ``1 - epsilon`` (the ceiling,
  and with ``epsilon > 0`` a known-ground-truth agent that makes mistakes and must recover);
* :class:`~budget_envs.eval.chat.ChatAgent` - any OpenAI-compatible chat-completions endpoint
  (vLLM, SGLang, llama.cpp's server, ``transformers serve``, hosted APIs), async, with native
  tool calls for tool-use envs (importable from here too).

Agents never see the budget unless the env shows it in the observation: the runner removes
``info["budget"]`` for budget-hidden runs, which is what makes the single-run derivation valid.
"""

from __future__ import annotations

import importlib
import json
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from budget_envs._util import tool_call_action
from budget_envs.errors import AgentError
from budget_envs.eval.prompts import DEFAULT_PROMPTS, system_prompt

__all__ = [
    "AGENT_KINDS",
    "Agent",
    "AgentError",
    "DEFAULT_PROMPTS",
    "OracleAgent",
    "RandomAgent",
    "agent_builder",
    "make_agent",
    "parse_spec",
    "spec_from_mapping",
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


# ---------------------------------------------------------------------- kinds
#: The agent kinds of a spec's ``KIND``: a class, or a ``"module:attr"`` entry point imported
#: when the kind is first asked for (the chat client; the trained-policy agent, which loads torch
#: and lives with the integrations whose models it plays, so eval imports none of their code).
#: Add a row to offer a kind of your own.
AGENT_KINDS: dict[str, Callable[..., Any] | str] = {
    "random": RandomAgent,
    "oracle": OracleAgent,
    "chat": "budget_envs.eval.chat:ChatAgent",
    "policy": "budget_envs.integrations.policy_agent:PolicyAgent",
    "lm": "budget_envs.integrations.lm.agent:LMAgent",
}


def agent_builder(kind: str) -> Callable[..., Any]:
    """The builder of agent ``kind`` (a row of :data:`AGENT_KINDS`), its module imported now.

    >>> agent_builder("random").__name__
    'RandomAgent'
    """
    if kind not in AGENT_KINDS:
        raise ValueError(f"unknown agent kind {kind!r}; expected one of {sorted(AGENT_KINDS)}")
    builder = AGENT_KINDS[kind]
    if isinstance(builder, str):
        module_name, _, attr = builder.partition(":")
        builder = getattr(importlib.import_module(module_name), attr)
    return builder


# ---------------------------------------------------------------------- specs
def _value_at(spec: str, i: int) -> tuple[Any, int]:
    """The value starting at ``spec[i]`` and the index after it.

    A JSON value (object, array, string, number, true/false/null) is taken whole when a comma
    or the end follows it, so ``stop=["\\n","###"]`` and ``extra_body={"a": 1, "b": 2}`` keep
    their commas; anything else runs to the next comma and is a string.
    """
    if i < len(spec) and spec[i] in '{["':
        try:
            value, end = json.JSONDecoder().raw_decode(spec, i)
        except ValueError:
            pass
        else:
            if end == len(spec) or spec[end] == ",":
                return value, end
    end = spec.find(",", i)
    end = len(spec) if end < 0 else end
    text = spec[i:end].strip()
    try:
        return json.loads(text), end
    except ValueError:
        return text, end


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``KIND[:key=value,...]`` into ``(kind, kwargs)``; values are JSON when they parse.

    A policy agent names its folder first: ``policy:DIR[,key=value,...]``.

    >>> parse_spec('chat:model=qwen,stop=["a","b"],extra_body={"x": 1, "y": 2}')
    ('chat', {'model': 'qwen', 'stop': ['a', 'b'], 'extra_body': {'x': 1, 'y': 2}})
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"agent spec must be a non-empty string, got {spec!r}")
    kind, colon, rest = spec.partition(":")
    kwargs: dict[str, Any] = {}
    i = 0
    if kind == "policy" and rest and "=" not in rest.split(",", 1)[0]:
        kwargs["path"], comma, tail = rest.partition(",")  # policy:DIR[,key=value...]
        rest, colon = tail, comma
    while colon and i < len(rest):
        eq = rest.find("=", i)
        comma = rest.find(",", i)
        if eq < 0 or (0 <= comma < eq):
            part = rest[i : comma if comma >= 0 else len(rest)]
            raise ValueError(f"agent spec {spec!r}: expected key=value, got {part!r}")
        key = rest[i:eq].strip().replace("-", "_")
        if not key:
            raise ValueError(f"agent spec {spec!r}: a value without a key at {rest[i:]!r}")
        kwargs[key], i = _value_at(rest, eq + 1)
        i += 1  # the comma
    return kind.strip(), kwargs


def spec_from_mapping(config: Mapping[str, Any]) -> str:
    """The spec string of an agent given as a mapping (``{"kind": "chat", "model": ...}``), in
    the form :func:`parse_spec` reads back exactly (every value as JSON)."""
    if not isinstance(config, Mapping) or not isinstance(config.get("kind"), str):
        raise ValueError(
            f"an agent config needs a 'kind' (random, oracle, chat, policy), got {config!r}"
        )
    rest = ",".join(
        f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in config.items() if k != "kind"
    )
    return f"{config['kind']}:{rest}" if rest else str(config["kind"])


def make_agent(spec: str | Mapping[str, Any], *, seed: int = 0) -> Any:
    """Build an agent from a CLI spec: ``random``, ``oracle``, ``oracle:epsilon=0.3``,
    ``chat:base_url=http://127.0.0.1:8000/v1,model=qwen,temperature=0.7``, ``policy:DIR`` (a
    trained policy folder, see :mod:`budget_envs.integrations.policy_agent`), or from a mapping
    with a ``kind`` key (what ``--agent-config FILE`` holds). The kinds are the rows of
    :data:`AGENT_KINDS`.

    The values are JSON when they parse as JSON (``stop=["\\n"]``, ``extra_body={...}``), else
    strings. ``seed`` seeds the random and oracle agents; a chat agent sends a request seed
    only when its spec sets one.
    """
    if isinstance(spec, Mapping):
        kind, kwargs = str(spec.get("kind", "")), {k: v for k, v in spec.items() if k != "kind"}
        kwargs = {k.replace("-", "_"): v for k, v in kwargs.items()}
        shown: Any = dict(spec)
    else:
        kind, kwargs = parse_spec(spec)
        shown = spec
    if "eps" in kwargs:
        kwargs["epsilon"] = kwargs.pop("eps")
    if kind not in AGENT_KINDS:
        raise ValueError(
            f"unknown agent kind {kind!r} in {shown!r}; expected one of {sorted(AGENT_KINDS)}"
        )
    if kind != "chat":
        kwargs.setdefault("seed", seed)
    try:
        return agent_builder(kind)(**kwargs)
    except TypeError as exc:
        raise ValueError(f"agent spec {shown!r}: {exc}") from None


def __getattr__(name: str) -> Any:
    # ChatAgent lives in budget_envs.eval.chat, imported on first use; kept importable here.
    if name == "ChatAgent":
        from budget_envs.eval.chat import ChatAgent

        return ChatAgent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
