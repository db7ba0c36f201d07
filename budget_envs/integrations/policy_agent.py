"""A trained policy as an evaluation agent: ``--agent NAME=policy:DIR``.

Eval names this agent by entry point only (the ``policy`` row of
:data:`budget_envs.eval.agents.AGENT_KINDS`): it lives here, beside the training code whose
models it loads, so eval imports nothing of the integrations.

``DIR`` is what ``budgetmix train`` wrote. For ``--trainer rllib`` that is ``policy.json`` plus
``module.safetensors`` (and RLlib's checkpoint, which the agent does not read): the agent builds
the RLModule from those two files alone (no pickle is read, no Ray cluster starts; a folder that
would need RLlib's pickled checkpoint is refused unless ``trust=true``, see
:mod:`budget_envs.integrations.rllib_weights`), renders every state with the same
:class:`~budget_envs.integrations.rllib_features.Featurizer` settings as in training and scores
the offered actions. A Hugging Face model folder (``config.json``) is handed to the TRL
integration's ``load_policy(DIR, **options)``.

A policy trained budget-hidden must not see the budget, and one trained with the budget shown is
meaningless without it: the agent refuses (``AgentError`` at the episode's start) when the
evaluation's visibility differs from the training's (the runner hands agents ``info["budget"]``
exactly when the budget is visible), unless built with ``check_visibility=false``.

Single-step probes teacher-force the oracle prefix through :meth:`PolicyAgent.teacher_force`,
which updates the same episode history that the policy's own actions do.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs.errors import AgentError

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
        name: the agent's name in records (default ``policy:<folder name>``).
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
        self.name = name or f"policy:{folder.name}"
        meta_file = folder / "policy.json"
        self._hf = None
        if meta_file.exists():
            try:
                self.meta = json.loads(meta_file.read_text())
            except ValueError as exc:
                raise ValueError(f"{meta_file} is not valid JSON ({exc})") from None
            if self.meta.get("trainer") != "rllib":
                raise ValueError(
                    f"{meta_file}: trainer {self.meta.get('trainer')!r} is not an RLlib policy"
                )
            from budget_envs.integrations.rllib_weights import check_loadable

            check_loadable(folder, trust=trust)  # refused now, before any episode
        elif (folder / "config.json").exists():
            self.meta = {"trainer": "hf"}
            self._hf = self._load_hf(folder)
            self.name = name or self._hf.name
        else:
            raise ValueError(
                f"{folder} is neither a policy folder of `budgetmix train` (policy.json) nor a "
                "Hugging Face model folder (config.json)"
            )
        self.visibility = self.meta.get("visibility")
        self._module: Any = None
        self._featurizer: Any = None
        self._actions: list[str] = []
        self._rng = np.random.default_rng(seed)

    def _load_hf(self, folder: Path) -> Any:
        trained = folder / "budgetmix_policy.json"
        if trained.is_file():
            try:
                meta = json.loads(trained.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise ValueError(f"{trained} is not valid JSON ({exc})") from None
            if isinstance(meta, dict) and (
                meta.get("trainer") == "sft" or meta.get("render") == "lm"
            ):
                # What `--trainer sft` wrote (and GRPO resumed from it) plays as the lm agent.
                from budget_envs.integrations.lm.agent import LMAgent

                return LMAgent(
                    model=str(folder),
                    seed=self.seed,
                    check_visibility=self.check_visibility,
                    show_actions=bool((meta.get("settings") or meta).get("show_actions", True)),
                    temperature=0.0 if self.greedy else 0.7,
                    name=f"policy:{folder.name}",
                )
        try:
            from budget_envs.integrations import trl
        except ImportError as exc:
            raise ValueError(
                f"{folder}: a Hugging Face policy needs the TRL extra ({exc})"
            ) from None
        load = getattr(trl, "load_policy", None)
        if not callable(load):
            raise ValueError(
                f"{folder} is a Hugging Face model folder, but this install's TRL integration "
                "has no load_policy() to play it"
            )
        return load(str(folder), seed=self.seed, check_visibility=self.check_visibility)

    # -- the module does not pickle cheaply: worker processes load their own copy
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_module"] = None
        return state

    def _load(self) -> None:
        from budget_envs._util import require
        from budget_envs.integrations.rllib_features import FeatureSpec, Featurizer
        from budget_envs.integrations.rllib_weights import load_module

        require("ray", "ray.rllib", "torch", extra="rllib", what="an RLlib policy agent")
        try:
            self._module = load_module(self.path, self.meta, trust=self.trust)
        except ValueError as exc:
            raise AgentError(str(exc)) from None
        self._featurizer = Featurizer(FeatureSpec.from_dict(self.meta["features"]))

    def reset(self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int) -> None:
        if self._hf is not None:
            self._hf.reset(env_id=env_id, observation=observation, info=info, seed=seed)
            return
        if self.check_visibility:
            from budget_envs.integrations.common import check_trained_visibility

            check_trained_visibility(self.name, self.visibility, info)
        if self._module is None:
            self._load()
        self._featurizer.reset(info.get("goal", ""))
        self._featurizer.observe(observation)
        self._rng = np.random.default_rng([self.seed, int(seed) % 2**32])

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        if self._hf is not None:
            return self._hf.act(observation, info)
        from budget_envs.integrations.rllib_module import score_actions

        # One row per offered action: the module scores any number, so a state with more actions
        # than the training's slots is still played.
        arrays, actions = self._featurizer.encode(observation, info, exact=True)
        probs = score_actions(self._module, arrays, len(actions))
        k = int(np.argmax(probs)) if self.greedy else int(self._rng.choice(len(probs), p=probs))
        action = actions[k] if k < len(actions) else ""
        self._featurizer.record(action)
        return action

    def teacher_force(self, action: str, observation: str, info: Mapping[str, Any]) -> None:
        """An action chosen by someone else ran, and ``observation`` followed."""
        if self._hf is not None:
            fn = getattr(self._hf, "teacher_force", None)
            if fn is not None:
                fn(action, observation, info)
            return
        self._featurizer.record(action)
        self._featurizer.observe(observation)
