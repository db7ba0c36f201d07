"""RLlib integration: BudgetMix envs as masked discrete-action envs for PPO (the ``rllib`` extra).

RLlib's default models cannot read ``Text`` spaces, so :class:`MaskedTextEnv` turns a BudgetMix
env into::

    observation  Dict(observations=Box(0, 1, (D + 3 + K * S,)), action_mask=Box(0, 1, (K,)))
    action       Discrete(K): slot k runs the k-th admissible command

``observations`` holds hashed word and word-pair counts of the observation text (D buckets,
``zlib.crc32``: stable across processes, unlike ``hash()``), three budget features (turns left
and used, as fractions of the episode's budget, and the budget over ``max_budget``) and S
hashed word buckets for each of the K command slots, so the policy can tell the slots apart.
A command with a ``[...]`` placeholder (the web shop's ``search[...]``) is filled with the goal
text, so free-text actions get one usable choice. A slot with no command is masked; if one is
picked anyway (``check_env`` samples unmasked actions) the turn is sent as an empty action: an
invalid turn that still counts.

:class:`MaskedPPOTorchModule` is the matching PPO RLModule (logits of masked slots pushed to
-1e9). :func:`register` registers the env creator with Tune under a name; remote env runners
import :func:`env_creator` from this module, so it works across processes.
``import budget_envs`` never imports ray or torch.
"""

from __future__ import annotations

import logging
import re
import zlib
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from budget_envs._util import require
from budget_envs.integrations.common import DEFAULT_BUDGET, make_env

__all__ = [
    "DEFAULT_ENV_NAME",
    "MaskedTextEnv",
    "env_creator",
    "hash_features",
    "ppo_config",
    "register",
]

logger = logging.getLogger(__name__)

#: The name :func:`register` uses unless told otherwise.
DEFAULT_ENV_NAME = "budgetmix"
_WORD = re.compile(r"[a-z0-9]+")


def _require() -> None:
    require("ray", "ray.rllib", "torch", extra="rllib", what="the RLlib integration")


def hash_features(text: str, dim: int, bigrams: bool = True) -> np.ndarray:
    """Hashed bag of words (and word pairs) of ``text`` in ``dim`` buckets, scaled into [0, 1].

    Buckets come from ``zlib.crc32`` (the same in every process); counts are log-scaled and
    divided by the largest, so the vector is in [0, 1] whatever the text length.
    """
    out = np.zeros(dim, dtype=np.float32)
    words = _WORD.findall(text.lower())
    grams = words + ([f"{a} {b}" for a, b in zip(words, words[1:])] if bigrams else [])
    for gram in grams:
        out[zlib.crc32(gram.encode()) % dim] += 1.0
    if grams:
        np.log1p(out, out=out)
        out /= out.max()
    return out


class MaskedTextEnv(gym.Env):
    """A BudgetMix env with fixed-size observations and masked discrete actions (see module doc).

    Args:
        env: a BudgetMix id (built with ``gymnasium.make(env, budget=..., visibility=...)``) or
            a ready env (anything with text observations and ``info["admissible_actions"]``).
        budget, visibility, faults: the wrapper options of ``gymnasium.make`` (with an id).
        process_reward: the scale of a :class:`ProcessReward` signal added to the reward.
        max_actions: K, the number of command slots (later commands are dropped).
        obs_dim: D, hashed buckets for the observation text.
        slot_dim: S, hashed buckets per command slot.
        max_budget: the budget feature is ``limit / max_budget`` (capped at 1).
        fill_placeholder: fill ``[...]`` in a command with the goal (see the module docstring).
        seed: the seed of the first reset when the trainer passes none.
        env_kwargs: extra constructor kwargs of the env (with an id).
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        env: str | gym.Env,
        *,
        budget: Any = DEFAULT_BUDGET,
        visibility: str = "hidden",
        faults: Any = None,
        process_reward: float | None = None,
        max_actions: int = 16,
        obs_dim: int = 256,
        slot_dim: int = 16,
        max_budget: int = 100,
        fill_placeholder: bool = True,
        seed: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(fill_placeholder, bool):
            raise TypeError(f"fill_placeholder must be a bool, got {fill_placeholder!r}")
        for name, value in (
            ("max_actions", max_actions),
            ("obs_dim", obs_dim),
            ("slot_dim", slot_dim),
            ("max_budget", max_budget),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if isinstance(env, str):
            env = make_env(
                env,
                budget=budget,
                visibility=visibility,
                faults=faults,
                process_reward=process_reward,
                **(env_kwargs or {}),
            )
        elif not isinstance(env, gym.Env):
            raise TypeError(f"env must be an env id or a gymnasium.Env, got {env!r}")
        self.env = env
        self.max_actions = int(max_actions)
        self.obs_dim = int(obs_dim)
        self.slot_dim = int(slot_dim)
        self.max_budget = int(max_budget)
        self.fill_placeholder = fill_placeholder
        self._seed = seed
        size = self.obs_dim + 3 + self.max_actions * self.slot_dim
        self.observation_space = spaces.Dict(
            {
                "observations": spaces.Box(0.0, 1.0, (size,), np.float32),
                "action_mask": spaces.Box(0.0, 1.0, (self.max_actions,), np.float32),
            }
        )
        self.action_space = spaces.Discrete(self.max_actions)
        self.commands: list[str] = []
        #: Turns played, and turns whose slot held no command (masked slots picked anyway).
        self.turns = 0
        self.empty_slot_turns = 0
        self._slot_cache: dict[str, np.ndarray] = {}

    def _encode(self, obs: str, info: dict[str, Any]) -> dict[str, np.ndarray]:
        commands = list(info.get("admissible_actions") or [])[: self.max_actions]
        if self.fill_placeholder and info.get("goal"):
            goal = " ".join(str(info["goal"]).split())[:200]
            commands = [c.replace("[...]", f"[{goal}]") for c in commands]
        self.commands = commands
        mask = np.zeros(self.max_actions, dtype=np.float32)
        mask[: len(self.commands)] = 1.0
        if not self.commands:
            mask[0] = 1.0  # never all-masked: slot 0 then plays an (invalid) empty turn
        budget = info.get("budget")
        feats = np.zeros(3, dtype=np.float32)
        if budget and budget.get("limit"):
            limit = float(budget["limit"])
            feats[:] = (
                budget["remaining"] / limit,
                budget["used"] / limit,
                min(limit / self.max_budget, 1.0),
            )
        slots = np.zeros((self.max_actions, self.slot_dim), dtype=np.float32)
        for k, cmd in enumerate(self.commands):
            vec = self._slot_cache.get(cmd)
            if vec is None:
                vec = hash_features(cmd, self.slot_dim, bigrams=False)
                if len(self._slot_cache) < 50_000:
                    self._slot_cache[cmd] = vec
            slots[k] = vec
        observations = np.concatenate(
            [hash_features(obs, self.obs_dim), np.clip(feats, 0.0, 1.0), slots.ravel()]
        )
        return {"observations": observations, "action_mask": mask}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset the BudgetMix env (the seed goes to it and to its budget draws)."""
        super().reset(seed=seed)
        if seed is None and self._seed is not None:
            seed, self._seed = self._seed, None
        obs, info = self.env.reset(seed=seed, options=options)
        return self._encode(obs, info), info

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Run the command in slot ``action``; an empty slot is an invalid (empty) turn."""
        index = int(action)
        command = self.commands[index] if 0 <= index < len(self.commands) else ""
        self.turns += 1
        self.empty_slot_turns += command == ""
        obs, reward, terminated, truncated, info = self.env.step(command)
        return self._encode(obs, info), float(reward), terminated, truncated, info

    def close(self) -> None:
        """Close the BudgetMix env."""
        self.env.close()


def env_creator(config: dict[str, Any] | None = None) -> MaskedTextEnv:
    """Build a :class:`MaskedTextEnv` from an RLlib ``env_config`` (keys: its arguments).

    ``config["env_id"]`` names the BudgetMix id. A worker index in the config (RLlib's
    ``EnvContext``) shifts the seed so parallel runners play different episodes.
    """
    worker = int(getattr(config, "worker_index", 0) or 0)
    vector = int(getattr(config, "vector_index", 0) or 0)
    config = dict(config or {})
    if "env_id" not in config:
        raise ValueError(f"env_config needs an 'env_id' (a BudgetMix id), got {sorted(config)}")
    env_id = config.pop("env_id")
    seed = config.pop("seed", None)
    if seed is not None:
        seed = int(seed) + 1000 * worker + vector
    return MaskedTextEnv(env_id, seed=seed, **config)


def register(name: str = DEFAULT_ENV_NAME) -> str:
    """Register :func:`env_creator` with Tune under ``name`` and return the name.

    Call it in the driver; env runners resolve the creator by importing this module.
    """
    _require()
    from ray.tune.registry import register_env

    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    register_env(name, env_creator)
    return name


def _module_class() -> type:
    """Build the masked PPO module class (imports torch and RLlib, so only on demand)."""
    _require()
    import torch
    from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import (
        DefaultPPOTorchRLModule,
    )
    from ray.rllib.core.columns import Columns

    class MaskedPPOTorchModule(DefaultPPOTorchRLModule):
        """PPO's default torch module over ``obs["observations"]``, with masked action logits.

        The encoder, policy and value heads are RLlib's defaults built for the inner Box; the
        mask only acts on the policy's logits: masked slots get -1e9, so they are never sampled
        and carry no probability in the PPO loss. Values ignore the mask.
        """

        def __init__(self, *args: Any, observation_space: gym.Space | None = None, **kwargs: Any):
            if not isinstance(observation_space, spaces.Dict) or set(observation_space) != {
                "observations",
                "action_mask",
            }:
                raise ValueError(
                    "MaskedPPOTorchModule needs a Dict(observations=Box, action_mask=Box) "
                    f"observation space (MaskedTextEnv's), got {observation_space!r}"
                )
            self._full_space = observation_space
            super().__init__(*args, observation_space=observation_space["observations"], **kwargs)
            self.observation_space = observation_space

        @staticmethod
        def _split(batch: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            obs = batch[Columns.OBS]
            if not isinstance(obs, dict):
                return batch, None
            inner = dict(batch)
            inner[Columns.OBS] = obs["observations"]
            return inner, obs["action_mask"]

        @staticmethod
        def _mask(out: dict[str, Any], mask: Any) -> dict[str, Any]:
            if mask is not None:
                logits = out[Columns.ACTION_DIST_INPUTS]
                out[Columns.ACTION_DIST_INPUTS] = torch.where(
                    mask > 0.5, logits, torch.full_like(logits, -1e9)
                )
            return out

        def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
            inner, mask = self._split(batch)
            return self._mask(super()._forward(inner, **kwargs), mask)

        def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
            inner, mask = self._split(batch)
            return self._mask(super()._forward_train(inner, **kwargs), mask)

        def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> Any:
            inner, _ = self._split(batch)
            return super().compute_values(inner, embeddings)

    MaskedPPOTorchModule.__module__ = __name__
    MaskedPPOTorchModule.__qualname__ = "MaskedPPOTorchModule"
    return MaskedPPOTorchModule


_LAZY: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    # The module class subclasses RLlib's torch module, so it is built on first access; pickling
    # by reference (``budget_envs.integrations.rllib.MaskedPPOTorchModule``) resolves through here.
    if name == "MaskedPPOTorchModule":
        if name not in _LAZY:
            _LAZY[name] = _module_class()
        return _LAZY[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def ppo_config(
    env_config: dict[str, Any],
    *,
    env_name: str = DEFAULT_ENV_NAME,
    hidden: tuple[int, ...] = (64, 64),
    train_batch_size: int = 256,
    minibatch_size: int = 64,
    num_epochs: int = 4,
    lr: float = 3e-4,
    num_env_runners: int = 0,
    seed: int | None = 0,
) -> Any:
    """A ``PPOConfig`` on the new API stack for a registered :class:`MaskedTextEnv`.

    ``env_config`` is passed to :func:`env_creator` (it needs ``env_id``). Registers the env
    under ``env_name`` and sets :class:`MaskedPPOTorchModule` as the module.
    """
    _require()
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    register(env_name)
    module_class = __getattr__("MaskedPPOTorchModule")
    config = (
        PPOConfig()
        .environment(env_name, env_config=dict(env_config))
        .framework("torch")
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=1)
        .training(
            lr=lr,
            train_batch_size_per_learner=train_batch_size,
            minibatch_size=minibatch_size,
            num_epochs=num_epochs,
        )
        .rl_module(
            rl_module_spec=RLModuleSpec(
                module_class=module_class,
                model_config=DefaultModelConfig(fcnet_hiddens=list(hidden)),
            )
        )
        .debugging(seed=seed)
    )
    return config
