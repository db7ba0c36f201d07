"""Every setting of an RLlib training run, in one object: :class:`RLlibTrainConfig`.

:func:`~budget_envs.integrations.rllib.training.train` takes it whole (``train(env_id, config)``)
or builds it from keyword arguments (``train(env_id, out_dir=..., iterations=...)``), the way
TRL's trainers take a ``GRPOConfig``. ``budgetmix train --trainer rllib`` maps its flags onto
the fields; ``policy.json`` records them (:meth:`RLlibTrainConfig.settings`). No torch, no ray:
the config imports as cheaply as the command line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budget_envs.integrations.common import DEFAULT_BUDGET
from budget_envs.integrations.rllib.env import check_minibatch

__all__ = ["RLlibTrainConfig"]

#: Integer fields and their least value (``iterations`` may be 0 only after a warm start).
_AT_LEAST = {
    "checkpoint_every": 1,
    "num_cpus": 1,
    "num_envs_per_env_runner": 1,
    "warm_start_episodes": 0,
    "warm_start_epochs": 1,
    "imitation_steps": 0,
    "imitation_epochs": 1,
}
#: The fields ``policy.json`` records under ``settings`` (with the minibatch resolved and the
#: env runners counted when the run starts).
_SETTINGS = (
    "gamma",
    "train_batch_size",
    "minibatch_size",
    "num_epochs",
    "lr",
    "entropy_coeff",
    "hidden",
    "process_reward",
    "process_max_cost",
    "budget_terminal",
    "seed",
    "packed",
    "num_envs_per_env_runner",
    "torch_threads",
    "warm_start_episodes",
    "warm_start_epochs",
    "warm_start_explore",
    "warm_start_lr",
    "imitation_steps",
    "imitation_epochs",
)


@dataclass(frozen=True, kw_only=True)
class RLlibTrainConfig:
    """What one PPO run of the action-scoring policy trains on, with what, and where to.

    Checked when built: a bad value raises ``ValueError`` quoting it, before any Ray starts.

    Attributes:
        out_dir: the policy folder to write (required).
        iterations: PPO iterations in total, counting resumed ones (required; 0 keeps the warm
            start alone).
        budget: the budget spec of the training env (default: the id's).
        visibility: ``hidden``, ``remaining``, ``final_warning`` or a template.
        env_kwargs: constructor kwargs of the env.
        seed: seeds the envs, the warm start and RLlib.
        gamma: the discount, in (0, 1].
        max_actions: action slots to start with (they grow on their own, see ``grow_slots``).
        train_batch_size: env steps per PPO iteration.
        minibatch_size: PPO's minibatch (None: 512 or the batch, whichever is smaller).
        num_epochs: PPO epochs per batch.
        lr: PPO's learning rate.
        entropy_coeff: PPO's entropy bonus.
        hidden: the policy network's width.
        process_reward: the scale of the oracle's progress signal added to the reward (None:
            outcome reward only).
        process_max_cost: the progress signal's ``max_cost``.
        budget_terminal: the step on which the budget runs out is terminal, not a truncation
            (see :class:`~budget_envs.integrations.rllib.env.MaskedTextEnv`).
        checkpoint_every: iterations between checkpoints (the last is always saved).
        resume: continue the checkpoint in ``out_dir`` (pickle: only a folder you trained).
        num_cpus: CPUs of the local Ray started when none runs.
        num_env_runners: remote env runners (None: one per CPU of the Ray, none on one CPU).
        num_envs_per_env_runner: envs each runner steps as one vector env.
        packed: score only the offered actions (False: every slot, the old path).
        torch_threads: torch threads in every process (None: torch's default).
        grow_slots: rebuild with more slots when a state offers more actions than
            ``max_actions`` (False: raise ``TooManyActions``).
        warm_start_episodes: oracle episodes to fit the policy to before PPO (0: none).
        warm_start_epochs: epochs of that fit.
        warm_start_explore: the share of random turns while collecting its states.
        warm_start_lr: Adam's learning rate of the warm start.
        imitation_steps: with ``resume``, first fit the resumed policy to that many env steps
            of new oracle episodes (more imitation, the study's equal-compute control; once:
            a later resume does not redo it), ``imitation_epochs`` epochs at ``warm_start_lr``
            with ``warm_start_explore`` random turns (0: none).
        imitation_epochs: epochs of that fit.
        report_to: also log every ``metrics.csv`` row to ``tensorboard`` and/or ``wandb``.
    """

    out_dir: str | os.PathLike
    iterations: int
    budget: Any = DEFAULT_BUDGET
    visibility: str = "hidden"
    env_kwargs: Mapping[str, Any] | None = None
    seed: int = 0
    gamma: float = 0.99
    max_actions: int = 256
    train_batch_size: int = 1024
    minibatch_size: int | None = None
    num_epochs: int = 2
    lr: float = 3e-4
    entropy_coeff: float = 0.01
    hidden: int = 64
    process_reward: float | None = None
    process_max_cost: int = 100
    budget_terminal: bool = True
    checkpoint_every: int = 5
    resume: bool = False
    num_cpus: int = 2
    num_env_runners: int | None = None
    num_envs_per_env_runner: int = 16
    packed: bool = True
    torch_threads: int | None = 1
    grow_slots: bool = True
    warm_start_episodes: int = 50
    warm_start_epochs: int = 20
    warm_start_explore: float = 0.0
    warm_start_lr: float = 3e-3
    imitation_steps: int = 0
    imitation_epochs: int = 4
    report_to: str | list[str] | None = None

    def __post_init__(self) -> None:
        fits = self.warm_start_episodes or self.imitation_steps
        least = {"iterations": 0 if fits else 1, **_AT_LEAST}
        for name, low in least.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        for name, low in (("num_env_runners", 0), ("torch_threads", 1)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{name} must be an int or None, got {value!r}")
            if value is not None and value < low:
                raise ValueError(f"{name} is out of range: {value!r}")
        if not isinstance(self.gamma, (int, float)) or not 0.0 < float(self.gamma) <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma!r}")
        check_minibatch(self.train_batch_size, self.minibatch_size)
        if self.imitation_steps and not self.resume:
            raise ValueError("imitation_steps continues a policy: it needs resume=True")

    @property
    def minibatch(self) -> int:
        """The minibatch PPO uses (``minibatch_size`` resolved)."""
        return check_minibatch(self.train_batch_size, self.minibatch_size)

    def env_config(self, env_id: str, error_file: Path) -> dict[str, Any]:
        """The RLlib ``env_config`` of the training env (what
        :func:`~budget_envs.integrations.rllib.env.env_creator` reads)."""
        config = {
            "env_id": env_id,
            "visibility": self.visibility,
            "max_actions": self.max_actions,
            "seed": self.seed,
            "env_kwargs": dict(self.env_kwargs or {}),
            "process_reward": self.process_reward,
            "process_max_cost": self.process_max_cost,
            "budget_terminal": self.budget_terminal,
            "error_file": str(error_file),
        }
        if self.budget is not DEFAULT_BUDGET:
            config["budget"] = self.budget
        return config

    def settings(self) -> dict[str, Any]:
        """The ``settings`` entry of ``policy.json`` (the minibatch resolved)."""
        values = {name: getattr(self, name) for name in _SETTINGS}
        values["minibatch_size"] = self.minibatch
        return values
