"""A trained policy as an evaluation agent: ``--agent NAME=policy:DIR``.

Eval names this agent by entry point only (the ``policy`` row of
:data:`budget_envs.eval.agents.AGENT_KINDS`): it lives here, beside the training code whose
models it loads, so eval imports nothing of the integrations.

``DIR`` is what ``budgetmix train`` wrote. The trainer table
(:mod:`budget_envs.integrations.trainers`) says which trainer wrote it (the ``"trainer"`` key of
the policy file the folder holds, :func:`~budget_envs.integrations.trainers.read_policy_folder`)
and which loader plays it:

* ``--trainer rllib`` (``policy.json`` plus ``module.safetensors``):
  :class:`~budget_envs.integrations.rllib.agent.RLlibPolicy` builds the RLModule from those two
  files alone (no pickle is read, no Ray cluster starts; a folder that would need RLlib's
  pickled checkpoint is refused unless ``trust=true``, see
  :mod:`budget_envs.integrations.rllib.weights`) and scores the offered actions;
* ``--trainer trl`` and ``--trainer sft`` (a Hugging Face model folder with
  ``budgetmix_policy.json``): :mod:`budget_envs.integrations.hf_policy` hands it to the TRL
  integration's ``load_policy`` or, for what SFT wrote, to the ``lm`` agent.

A policy trained budget-hidden must not see the budget, and one trained with the budget shown is
meaningless without it: the agent refuses (``AgentError`` at the episode's start) when the
evaluation's visibility differs from the training's (the runner hands agents ``info["budget"]``
exactly when the budget is visible), unless built with ``check_visibility=false``.

Single-step probes teacher-force the oracle prefix through :meth:`PolicyAgent.teacher_force`,
which updates the same episode history that the policy's own actions do.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from budget_envs.integrations.trainers import read_policy_folder

__all__ = ["PolicyAgent"]

logger = logging.getLogger(__name__)


class PolicyAgent:
    """Plays a policy folder written by ``budgetmix train`` (see the module docstring).

    Args:
        path: the policy folder.
        seed: seeds the action sampling (with each episode's seed).
        greedy: play the highest-scoring action instead of sampling from the policy.
        check_visibility: refuse an evaluation whose visibility differs from the training's.
        trust: allow a folder that can only load by unpickling (an RLlib checkpoint without
            ``module.safetensors``): unpickling runs any code the file names, so only for a
            folder you trained yourself (``--trust-policy`` on the command line).
        name: the agent's name in records (default: the loader's, ``policy:<folder name>``).
        device: where a language-model policy plays (``cuda``, ``cuda:1``, ``cpu``; default
            the CPU); refused for an RLlib folder, which always plays on the CPU.

    Attributes:
        trainer: the name of the trainer that wrote the folder (its row of the trainer table).
        meta: the folder's policy file, parsed.
        player: the agent the trainer's policy loader built; this one delegates to it.
    """

    def __init__(
        self,
        *,
        path: str | os.PathLike,
        seed: int = 0,
        greedy: bool = False,
        check_visibility: bool = True,
        trust: bool = False,
        name: str | None = None,
        device: str | None = None,
    ) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        for what, value in (
            ("greedy", greedy),
            ("check_visibility", check_visibility),
            ("trust", trust),
        ):
            if not isinstance(value, bool):
                raise TypeError(f"{what} must be true or false, got {value!r}")
        folder = Path(str(path)).expanduser()
        if not folder.is_dir():
            raise ValueError(f"policy folder {str(path)!r} does not exist")
        self.path = folder
        self.seed = seed
        self.greedy = greedy
        self.check_visibility = check_visibility
        self.trust = trust
        entry, self.meta = read_policy_folder(folder)
        self.trainer = entry.name
        self.visibility = self.meta.get("visibility")
        load = entry.policy_loader()
        extra = {} if device in (None, "") else {"device": str(device)}
        if extra and entry.name == "rllib":
            raise ValueError(f"device={device}: an RLlib policy folder plays on the CPU only")
        self.player = load(
            folder,
            self.meta,
            seed=seed,
            greedy=greedy,
            check_visibility=check_visibility,
            trust=trust,
            **extra,
        )
        self.name = name or getattr(self.player, "name", None) or f"policy:{folder.name}"

    def reset(self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int) -> None:
        self.player.reset(env_id=env_id, observation=observation, info=info, seed=seed)

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        return self.player.act(observation, info)

    def teacher_force(self, action: str, observation: str, info: Mapping[str, Any]) -> None:
        """An action chosen by someone else ran, and ``observation`` followed (passed on to the
        player when it can replay a prefix)."""
        force = getattr(self.player, "teacher_force", None)
        if force is not None:
            force(action, observation, info)
