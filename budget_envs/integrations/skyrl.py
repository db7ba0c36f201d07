"""SkyRL adapter: every BudgetMix id as a skyrl-gym ``BaseTextEnv`` (tested with skyrl-gym 0.4.0).

:func:`register` adds one skyrl-gym id per registered BudgetMix id (:func:`skyrl_name`:
``BudgetMix/ToolUse-v0`` becomes ``budgetmix_ToolUse_v0``). SkyRL's generator builds an env per
trajectory as ``skyrl_gym.make(env_class, env_config=..., extras=...)``:

* ``env_config`` is the env's entry of SkyRL's ``environment.skyrl_gym`` config (read there as
  ``getattr(cfg, env_class)``, hence names that are Python identifiers): an OmegaConf object, a
  dataclass, a mapping or None, with the keys ``budget``, ``visibility``, ``faults`` and
  ``env_kwargs`` of :func:`budget_envs.integrations.common.make_env`;
* ``extras`` are the dataset row's other columns: ``task_id`` and ``seed`` (also read from
  ``extras["extra_info"]``) choose the task and seed the budget draw and the faults, so the
  samples of one prompt play one task under one T. Without them the env draws both afresh.

The env is the one budget authority: ``done`` comes from its ``terminated or truncated``, and
``max_turns`` is set to the T drawn at :meth:`BudgetMixTextEnv.init`. SkyRL's generator stops
a trajectory only on ``done`` or its context length (``generator.max_input_length``); the
``generator.max_turns`` it hands over in ``extras`` is not a cap here (a warning is logged once
when it is below the drawn T, for code that would read it). ``import budget_envs`` never
imports skyrl_gym; this module needs the ``skyrl`` extra.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from numbers import Integral
from typing import Any

from budget_envs._util import import_optional
from budget_envs.eval.prompts import DEFAULT_PROMPTS, system_prompt
from budget_envs.integrations.common import DEFAULT_BUDGET, make_env
from budget_envs.integrations.trl.dialogue import action_from_reply

_base = import_optional(
    "skyrl_gym.envs.base_text_env", extra="skyrl", what="the SkyRL adapter (skyrl-gym)"
)
_registration = import_optional(
    "skyrl_gym.envs.registration", extra="skyrl", what="the SkyRL adapter (skyrl-gym)"
)

__all__ = ["CONFIG_KEYS", "PREFIX", "BudgetMixTextEnv", "register", "skyrl_name"]

logger = logging.getLogger(__name__)

#: The prefix of every skyrl-gym id :func:`register` adds.
PREFIX = "budgetmix"
#: The keys an ``env_config`` may hold.
CONFIG_KEYS = ("budget", "visibility", "faults", "env_kwargs")
_ENTRY_POINT = "budget_envs.integrations.skyrl:BudgetMixTextEnv"
_warned_max_turns = False


def skyrl_name(env_id: str) -> str:
    """The skyrl-gym id of a BudgetMix id: a Python identifier, as SkyRL's config needs.

    >>> skyrl_name("BudgetMix/TextWorld-CoinCollector-v0")
    'budgetmix_TextWorld_CoinCollector_v0'
    """
    if not isinstance(env_id, str) or "/" not in env_id:
        raise ValueError(f"env_id must look like 'Namespace/Name-vN', got {env_id!r}")
    name = env_id.split("/", 1)[1]
    return PREFIX + "_" + "".join(c if c.isalnum() else "_" for c in name)


def register(env_ids: Iterable[str] | None = None) -> list[str]:
    """Register ``env_ids`` (default: every registered BudgetMix id) with skyrl-gym.

    Call it where SkyRL's own examples register their envs: in the entrypoint task, so the
    Ray workers that build envs have the ids. Idempotent; returns the skyrl-gym ids.

    >>> import skyrl_gym
    >>> from budget_envs.integrations.skyrl import register
    >>> "budgetmix_ToolUse_v0" in register()
    True
    >>> env = skyrl_gym.make("budgetmix_ToolUse_v0")  # no arguments: the id's defaults
    >>> messages, metadata = env.init([])
    >>> metadata["budget"]["limit"], env.max_turns
    (40, 40)
    """
    from budget_envs.registry import registered_ids

    ids = list(registered_ids() if env_ids is None else env_ids)
    names = []
    for env_id in ids:
        name = skyrl_name(env_id)
        spec = _registration.registry.get(name)
        if spec is None:
            _registration.register(id=name, entry_point=_ENTRY_POINT, kwargs={"env_id": env_id})
        elif spec.kwargs.get("env_id") != env_id:
            raise ValueError(
                f"skyrl-gym id {name!r} is already registered for {spec.kwargs!r}, "
                f"not for {env_id!r}"
            )
        names.append(name)
    return names


def _plain(value: Any) -> Any:
    """OmegaConf containers (and their nested values) as plain dicts and lists."""
    if type(value).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    return value


def _read_config(env_config: Any) -> dict[str, Any]:
    """The ``env_config`` SkyRL hands over, as a dict of :data:`CONFIG_KEYS`."""
    if env_config is None:
        return {}
    env_config = _plain(env_config)
    if dataclasses.is_dataclass(env_config) and not isinstance(env_config, type):
        env_config = dataclasses.asdict(env_config)
    if isinstance(env_config, Mapping):
        unknown = sorted(str(k) for k in env_config if k not in CONFIG_KEYS)
        if unknown:
            raise TypeError(
                f"env_config has unknown keys {unknown}; the keys are {list(CONFIG_KEYS)}"
            )
        return {k: _plain(v) for k, v in env_config.items()}
    # Any other object (a typed config): read by attribute.
    return {k: _plain(getattr(env_config, k)) for k in CONFIG_KEYS if hasattr(env_config, k)}


def _extra(extras: Mapping[str, Any], key: str) -> Any:
    if extras.get(key) is not None:
        return extras[key]
    inner = extras.get("extra_info")
    if isinstance(inner, Mapping) and inner.get(key) is not None:
        return inner[key]
    return None


def _int_seed(seed: Any) -> int:
    """A seed from a dataset column: an int (or an integral float, as parquet may store it)."""
    if isinstance(seed, Integral) and not isinstance(seed, bool):
        return int(seed)
    if isinstance(seed, float) and seed.is_integer():
        return int(seed)
    raise TypeError(f"extras['seed'] must be an int, got {seed!r}")


class BudgetMixTextEnv(_base.BaseTextEnv):
    """A BudgetMix env as a skyrl-gym ``BaseTextEnv`` (text in, chat messages out).

    ``init(prompt)`` resets the env and returns the prompt's messages (the registry row's
    system prompt when the prompt has none) followed by the first observation as a user
    message (``Goal: ...`` first when the observation does not state it). ``step(action)``
    plays one turn with the action taken out of the reply (reasoning in ``<think>`` removed,
    then the first line, or all of a JSON reply) and returns the observation as a user message
    (the last one too), the turn's reward and ``done = terminated or truncated``; SkyRL keeps
    the model's own tokens (``postprocessed_action`` is always None). Bad actions (empty, NUL
    bytes, broken JSON) are turns with feedback, as in process. A step after ``done`` plays
    nothing: it returns ``done`` again with no observation and reward 0.

    ``metadata`` (of ``init`` and every step): ``won``, ``stop_reason`` (``""`` until the
    end), ``budget``, ``fault`` (the turn's fault, or None), ``state_hash``, ``task_id``,
    ``turn``, ``invalid_action`` and ``action`` (the action sent; ``""`` at init).

    Args:
        env_id: the BudgetMix id (set by :func:`register` for each skyrl-gym id).
        env_config: budget, visibility, faults and env kwargs (see the module docstring).
        extras: the dataset row's other columns; ``task_id`` and ``seed`` are read.
    """

    def __init__(
        self,
        env_id: str = "",
        env_config: Any = None,
        extras: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(env_id, str) or not env_id:
            raise TypeError(f"env_id must be a non-empty str, got {env_id!r}")
        if extras is not None and not isinstance(extras, Mapping):
            raise TypeError(f"extras must be a mapping or None, got {extras!r}")
        config = _read_config(env_config)
        budget = config.get("budget", DEFAULT_BUDGET)
        if budget is None:
            raise ValueError(
                "the SkyRL env needs a budget (budget=None): SkyRL's generator ends a "
                "trajectory only on done or at its context length"
            )
        env_kwargs = config.get("env_kwargs") or {}
        if not isinstance(env_kwargs, Mapping):
            raise TypeError(f"env_config['env_kwargs'] must be a mapping, got {env_kwargs!r}")
        extras = dict(extras or {})
        self.env_id = env_id
        self.task_id = _extra(extras, "task_id")
        seed = _extra(extras, "seed")
        self.seed = None if seed is None else _int_seed(seed)
        self.skyrl_max_turns = extras.get("max_turns")
        self.env = make_env(
            env_id,
            budget=budget,
            visibility=config.get("visibility") or "hidden",
            faults=config.get("faults"),
            **dict(env_kwargs),
        )
        self.done = False
        self.won = False
        self.reward = 0.0
        self.invalid_actions = 0
        self.faults = 0
        self._metadata: dict[str, Any] = {}

    def init(self, prompt: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], dict]:
        """Reset the env; the prompt's messages then the first observation, and metadata."""
        global _warned_max_turns
        task = self.task_id
        if task is not None and not isinstance(task, str):
            if isinstance(task, float) and task.is_integer():  # parquet's integral floats
                task = int(task)
            if isinstance(task, bool) or not isinstance(task, Integral):
                raise TypeError(f"extras['task_id'] must be a task id or an index, got {task!r}")
            task = int(task)  # an index of the env's task_ids, as reset(options=...) takes
        options = None if task is None else {"task_id": task}
        obs, info = self.env.reset(seed=self.seed, options=options)
        self.max_turns = int(info["budget"]["limit"])
        self.turns = 0
        self.done = False
        self.won = False
        self.reward = 0.0
        self.invalid_actions = 0
        self.faults = 0
        given = self.skyrl_max_turns
        if not _warned_max_turns and isinstance(given, int) and given < self.max_turns:
            _warned_max_turns = True
            logger.warning(
                "SkyRL's generator.max_turns (%d) is below the drawn budget T=%d of %s; the "
                "env ends episodes itself, but set it to at least the largest T",
                given,
                self.max_turns,
                self.env_id,
            )
        messages = [dict(m) for m in (prompt or [])]
        if not any(m.get("role") == "system" for m in messages):
            messages.insert(
                0, {"role": "system", "content": system_prompt(self.env_id, info, DEFAULT_PROMPTS)}
            )
        goal = info.get("goal")
        first = obs if not goal or goal in obs else f"Goal: {goal}\n\n{obs}"
        messages.append({"role": "user", "content": first})
        self._metadata = self._meta(info, "")
        return messages, dict(self._metadata)

    def step(self, action: str) -> dict[str, Any]:
        """Play one turn (see the class docstring)."""
        if self.done:
            return _base.BaseTextEnvStepOutput(
                observations=[],
                reward=0.0,
                done=True,
                metadata=dict(self._metadata),
                postprocessed_action=None,
            )
        if not isinstance(action, str):
            raise TypeError(f"step needs the model's reply as a str, got {type(action).__name__}")
        sent = action_from_reply(action)
        obs, reward, terminated, truncated, info = self.env.step(sent)
        self.turns += 1
        self.reward += float(reward)
        self.done = bool(terminated or truncated)
        self.won = bool(info.get("won"))
        self.invalid_actions += int(bool(info.get("invalid_action")))
        self.faults += int("fault" in info)
        self._metadata = self._meta(info, sent)
        return _base.BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": obs}],
            reward=float(reward),
            done=self.done,
            metadata=dict(self._metadata),
            postprocessed_action=None,
        )

    @staticmethod
    def _meta(info: Mapping[str, Any], action: str) -> dict[str, Any]:
        return {
            "won": bool(info.get("won")),
            "stop_reason": str(info.get("stop_reason") or ""),
            "budget": dict(info["budget"]),
            "fault": info.get("fault"),
            "state_hash": info["state_hash"],
            "task_id": info["task_id"],
            "turn": int(info["turn"]),
            "invalid_action": bool(info.get("invalid_action")),
            "action": action,
        }

    def get_metrics(self) -> dict[str, Any]:
        """The episode's numbers for SkyRL's logs (averaged over episodes by SkyRL)."""
        return {
            "won": float(self.won),
            "turns": self.turns,
            "budget": self.max_turns,
            "return": self.reward,
            "invalid_actions": self.invalid_actions,
            "faults": self.faults,
            "stop_budget": float(self._metadata.get("stop_reason") == "budget"),
        }

    def close(self) -> None:
        """Close the BudgetMix env."""
        self.env.close()
