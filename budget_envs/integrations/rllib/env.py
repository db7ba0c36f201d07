"""BudgetMix envs as action-scoring envs for RLlib's PPO, and the ``PPOConfig`` that trains them.

RLlib's default models cannot read ``Text`` spaces, and a fixed list of K command slots cannot
play every state (ALFWorld has up to 45 admissible commands; tool calls are open-ended). So
:class:`MaskedTextEnv` offers every action the state has: the env's own finite candidates
(``info["candidate_actions"]``: full tool calls for tool use, concrete searches for the web shop)
or its admissible commands, each encoded as a row of the observation, and
:class:`ActionScoringTorchModule` scores every row with one shared network (DRRN-style action
as input). The slot count ``max_actions`` (512 by default, three times the largest state seen in
any family: ToolUse level 3 offers up to about 170 tool calls) only bounds the array size: the
module scores the offered rows alone, so slots cost memory, not network time. A state with more
actions raises :class:`TooManyActions` (``budgetmix train`` reports it in one line).

The arrays are described in :mod:`~budget_envs.integrations.rllib.features`; budget features are
only filled when the visibility shows the budget, so ``visibility="hidden"`` policies are blind to
it. A slot with no action picked anyway (``check_env`` samples unmasked actions) is sent as an
empty action: an invalid turn that still counts.

``import budget_envs`` never imports ray or torch; this module imports them only on demand.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import gymnasium as gym
import numpy as np

from budget_envs._util import require
from budget_envs.integrations.common import (  # noqa: F401  (make_env: importable from here)
    DEFAULT_BUDGET,
    env_and_maker,
    make_env,
)
from budget_envs.integrations.rllib.features import (
    FeatureSpec,
    Featurizer,
    TooManyActions,
    hash_features,
)

__all__ = [
    "DEFAULT_ENV_NAME",
    "MINIBATCH_SIZE",
    "FeatureSpec",
    "MaskedTextEnv",
    "TooManyActions",
    "check_minibatch",
    "env_creator",
    "hash_features",
    "ppo_config",
    "register",
]

logger = logging.getLogger(__name__)

#: The name :func:`register` uses unless told otherwise.
DEFAULT_ENV_NAME = "budgetmix"
#: The keys of the slim ``info`` the adapter returns (RLlib keeps every info of every episode).
INFO_KEYS = ("task_id", "won", "lost", "invalid_action", "budget", "stop_reason")


def _require() -> None:
    require("ray", "ray.rllib", "torch", extra="rllib", what="the RLlib integration")


class MaskedTextEnv(gym.Env):
    """A BudgetMix env whose actions are the indices of the actions its state offers.

    Args:
        env: a BudgetMix id (built with ``gymnasium.make(env, budget=..., visibility=...)``) or
            a ready env (anything with text observations and ``info["admissible_actions"]``).
        budget, visibility, faults: the wrapper options of ``gymnasium.make`` (with an id).
            With a ready env, ``visibility`` must say what that env shows.
        process_reward: the scale of a :class:`ProcessReward` signal added to the reward.
        process_max_cost: its ``max_cost`` (a lost task costs ``scale * (max_cost - cost)``:
            keep it near the family's longest solution so one loss does not drown the wins).
        max_actions: slots for actions (a state with more raises :class:`TooManyActions`).
        obs_dim, goal_dim, hist_dim, action_tokens, vocab, max_budget: sizes of the arrays
            (see :class:`~budget_envs.integrations.rllib.features.FeatureSpec`).
        seed: the seed of the first reset when the trainer passes none.
        seed_offset: added to every seed the trainer passes (:func:`env_creator` sets it per env
            runner so sub-envs of different runners never share a seed).
        env_kwargs: extra constructor kwargs of the env (with an id).
        budget_terminal: report the step on which the budget runs out as terminal
            (``terminated=True``, ``truncated=False``; default), so a trainer scores running out
            of turns as the failure it is under a turn budget. With False it stays a truncation,
            which PPO's advantage estimate bootstraps with the value of the last state: an
            episode cut by the budget then earns what the policy could still have won, and a
            policy trained so is not pushed to finish within T.
        error_file: where an error raised by ``reset`` or ``step`` is written (one JSON line:
            its type and message) before it propagates. RLlib ends a remote env runner that
            raises without passing the error on, so the trainer reads it here (same machine).

    ``info`` is cut to :data:`INFO_KEYS`; :attr:`commands` holds this state's actions
    (slot k plays ``commands[k]``).
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
        process_max_cost: int = 100,
        max_actions: int = 512,
        obs_dim: int = 1024,
        goal_dim: int = 256,
        hist_dim: int = 256,
        action_tokens: int = 16,
        vocab: int = 8192,
        max_budget: int = 100,
        seed: int | None = None,
        seed_offset: int = 0,
        env_kwargs: dict[str, Any] | None = None,
        budget_terminal: bool = True,
        error_file: str | None = None,
    ) -> None:
        warn_within = 3
        self.error_file = None if error_file is None else str(error_file)
        self.budget_terminal = bool(budget_terminal)
        env, _ = env_and_maker(
            env,
            budget=budget,
            visibility=visibility,
            faults=faults,
            process_reward=process_reward,
            process_max_cost=process_max_cost,
            env_kwargs=env_kwargs,
        )
        try:
            warn_within = int(env.get_wrapper_attr("warn_within"))
        except AttributeError:
            pass
        self.features = FeatureSpec(
            obs_dim=obs_dim,
            goal_dim=goal_dim,
            hist_dim=hist_dim,
            max_actions=max_actions,
            action_tokens=action_tokens,
            vocab=vocab,
            visibility=visibility,
            warn_within=warn_within,
            max_budget=max_budget,
        )
        self.env = env
        self.featurizer = Featurizer(self.features)
        self._seed = seed
        if isinstance(seed_offset, bool) or not isinstance(seed_offset, int):
            raise TypeError(f"seed_offset must be an int, got {seed_offset!r}")
        self._seed_offset = seed_offset
        self.observation_space = self.features.observation_space()
        self.action_space = gym.spaces.Discrete(self.features.max_actions)
        self.commands: list[str] = []
        #: Encode each state with exactly its actions' rows (the arrays' shapes then vary: for
        #: code that reads states one at a time, like the warm start, not for RLlib).
        self.exact_slots = False
        #: Turns played, and turns whose slot held no action (masked slots picked anyway).
        self.turns = 0
        self.empty_slot_turns = 0

    @property
    def max_actions(self) -> int:
        """The number of action slots."""
        return self.features.max_actions

    def _encode(self, obs: str, info: dict[str, Any]) -> dict[str, np.ndarray]:
        arrays, self.commands = self.featurizer.encode(obs, info, exact=self.exact_slots)
        return arrays

    @staticmethod
    def _slim(info: dict[str, Any]) -> dict[str, Any]:
        return {k: info[k] for k in INFO_KEYS if k in info}

    def _record_error(self, exc: BaseException) -> None:
        if self.error_file is None:
            return
        line = json.dumps({"type": type(exc).__name__, "message": str(exc)})
        try:
            with open(self.error_file, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError:
            pass  # the error itself still propagates

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset the BudgetMix env (the seed goes to it and to its budget draws)."""
        try:
            return self._reset(seed=seed, options=options)
        except Exception as exc:
            self._record_error(exc)
            raise

    def _reset(
        self, *, seed: int | None, options: dict[str, Any] | None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        if seed is not None:
            seed = int(seed) + self._seed_offset
        super().reset(seed=seed)
        if seed is None and self._seed is not None:
            seed, self._seed = self._seed, None
        obs, info = self.env.reset(seed=seed, options=options)
        self.featurizer.reset(info.get("goal", ""))
        return self._encode(obs, info), self._slim(info)

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Play the action in slot ``action``; an empty slot is an invalid (empty) turn."""
        try:
            return self._step(action)
        except Exception as exc:
            self._record_error(exc)
            raise

    def _step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        index = int(action)
        command = self.commands[index] if 0 <= index < len(self.commands) else ""
        self.turns += 1
        self.empty_slot_turns += command == ""
        self.featurizer.record(command)
        obs, reward, terminated, truncated, info = self.env.step(command)
        if truncated and not terminated and self.budget_terminal:
            if info.get("stop_reason") == "budget":
                terminated, truncated = True, False
        return self._encode(obs, info), float(reward), terminated, truncated, self._slim(info)

    def close(self) -> None:
        """Close the BudgetMix env."""
        self.env.close()


def env_creator(config: dict[str, Any] | None = None) -> MaskedTextEnv:
    """Build a :class:`MaskedTextEnv` from an RLlib ``env_config`` (keys: its arguments).

    ``config["env_id"]`` names the BudgetMix id. A worker index in the config (RLlib's
    ``EnvContext``) shifts the seed so parallel runners play different episodes: RLlib seeds
    runner ``w``'s sub-env ``i`` with ``seed + w + i``, which two runners would share, so every
    seed it passes is also shifted by ``1000 * w``.
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
    config.pop("num_envs", None)  # RLlib's vector entry point adds it
    return MaskedTextEnv(env_id, seed=seed, seed_offset=1000 * worker, **config)


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


#: Weight syncs a remote env runner may have queued (see :func:`ppo_config`).
SYNC_REQUESTS_IN_FLIGHT = 64
#: PPO's minibatch when none is given (or the batch, when it is smaller).
MINIBATCH_SIZE = 512


def check_minibatch(train_batch_size: int, minibatch_size: int | None) -> int:
    """The minibatch PPO splits a ``train_batch_size`` batch into: ``minibatch_size``, or
    :data:`MINIBATCH_SIZE` capped at the batch when None.

    Raises:
        ValueError: either is not a positive int, or the minibatch is larger than the batch
            (RLlib would stop with its own error when the algorithm is built).
    """
    for name, value in (("train_batch_size", train_batch_size), ("minibatch_size", minibatch_size)):
        if value is None and name == "minibatch_size":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if minibatch_size is None:
        return min(MINIBATCH_SIZE, train_batch_size)
    if minibatch_size > train_batch_size:
        raise ValueError(
            f"minibatch_size ({minibatch_size}) must be at most train_batch_size "
            f"({train_batch_size}): PPO splits each batch into minibatches"
        )
    return minibatch_size


def ppo_config(
    env_config: dict[str, Any],
    *,
    env_name: str = DEFAULT_ENV_NAME,
    hidden: int = 64,
    embed: int = 64,
    train_batch_size: int = 1024,
    minibatch_size: int | None = None,
    num_epochs: int = 2,
    lr: float = 3e-4,
    gamma: float = 0.99,
    entropy_coeff: float = 0.01,
    num_env_runners: int = 0,
    num_envs_per_env_runner: int = 16,
    packed: bool = True,
    torch_threads: int | None = 1,
    seed: int | None = 0,
) -> Any:
    """A ``PPOConfig`` on the new API stack for a registered :class:`MaskedTextEnv`.

    ``env_config`` is passed to :func:`env_creator` (it needs ``env_id``). Registers the env
    under ``env_name``, sets :class:`ActionScoringTorchModule` as the module (``packed``: score
    the offered rows only; ``torch_threads``: torch threads in every process that builds it, None
    leaves torch's default) and :class:`BudgetMetricsCallback` as the callback. Each env runner
    steps ``num_envs_per_env_runner`` envs as one vector env (batched inference);
    ``num_env_runners=0`` samples in the driver. ``minibatch_size=None`` is
    :data:`MINIBATCH_SIZE` or the batch, whichever is smaller (:func:`check_minibatch`).
    """
    _require()
    minibatch_size = check_minibatch(train_batch_size, minibatch_size)
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from budget_envs.integrations.rllib import module as rllib_module

    register(env_name)
    config = (
        PPOConfig()
        .environment(env_name, env_config=dict(env_config), disable_env_checking=True)
        .framework("torch")
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=num_envs_per_env_runner,
            # RLlib sends new weights to remote runners without waiting and skips a runner whose
            # last weights have not landed yet (one request in flight by default): under load a
            # runner then samples with the weights before the warm start or the last update, and
            # a seed stops giving one policy. Calls from the driver run in order on each runner,
            # so with room for them every sample uses the latest weights.
            max_requests_in_flight_per_env_runner=SYNC_REQUESTS_IN_FLIGHT,
        )
        .training(
            lr=lr,
            gamma=gamma,
            entropy_coeff=entropy_coeff,
            train_batch_size_per_learner=train_batch_size,
            minibatch_size=minibatch_size,
            num_epochs=num_epochs,
        )
        .rl_module(
            rl_module_spec=RLModuleSpec(
                module_class=rllib_module.ActionScoringTorchModule,
                model_config={
                    "hidden": int(hidden),
                    "embed": int(embed),
                    "packed": bool(packed),
                    "torch_threads": None if torch_threads is None else int(torch_threads),
                },
            )
        )
        .callbacks(rllib_module.BudgetMetricsCallback)
        # An error in an env is a fact about the env or the policy's slots (TooManyActions), not
        # a lost machine: RLlib's default restarts the runner and trains on without its samples,
        # so the error never reaches the caller. Let it surface.
        .fault_tolerance(restart_failed_env_runners=False, ignore_env_runner_failures=False)
        .debugging(seed=seed)
    )
    return config
