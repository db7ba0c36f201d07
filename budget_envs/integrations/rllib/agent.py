"""An RLlib policy folder, played: the ``rllib`` row's policy loader.

``budgetmix train --trainer rllib`` writes ``policy.json`` plus ``module.safetensors`` (and
RLlib's checkpoint, which is not read here): :class:`RLlibPolicy` builds the RLModule from those
two files alone (no pickle is read, no Ray cluster starts; a folder that would need RLlib's
pickled checkpoint is refused unless ``trust`` is set, see
:mod:`budget_envs.integrations.rllib.weights`), renders every state with the training's
:class:`~budget_envs.integrations.rllib.features.Featurizer` settings and scores the offered
actions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs.errors import AgentError

__all__ = ["RLlibPolicy"]


class RLlibPolicy:
    """Plays the RLlib policy folder ``folder`` whose ``policy.json`` is ``meta``.

    Args:
        folder: the policy folder.
        meta: its ``policy.json``, parsed.
        seed: seeds the action sampling (with each episode's seed).
        greedy: play the highest-scoring action instead of sampling from the policy.
        check_visibility: refuse an evaluation whose visibility differs from the training's.
        trust: allow a folder that can only load by unpickling (no ``module.safetensors``).

    Raises:
        UntrustedPolicy: the folder could only load by unpickling and ``trust`` is false
            (checked now, before any episode).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        meta: Mapping[str, Any],
        *,
        seed: int = 0,
        greedy: bool = False,
        check_visibility: bool = True,
        trust: bool = False,
    ) -> None:
        from budget_envs.integrations.rllib.weights import check_loadable

        self.path = Path(folder)
        check_loadable(self.path, trust=trust)
        self.meta = dict(meta)
        self.seed = seed
        self.greedy = greedy
        self.check_visibility = check_visibility
        self.trust = trust
        self.name = f"policy:{self.path.name}"
        self.visibility = self.meta.get("visibility")
        self._module: Any = None
        self._featurizer: Any = None
        self._rng = np.random.default_rng(seed)

    # -- the module does not pickle cheaply: worker processes load their own copy
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_module"] = None
        return state

    def _load(self) -> None:
        from budget_envs._util import require
        from budget_envs.integrations.rllib.features import FeatureSpec, Featurizer
        from budget_envs.integrations.rllib.weights import load_module

        require("ray", "ray.rllib", "torch", extra="rllib", what="an RLlib policy agent")
        try:
            self._module = load_module(self.path, self.meta, trust=self.trust)
        except ValueError as exc:
            raise AgentError(str(exc)) from None
        self._featurizer = Featurizer(FeatureSpec.from_dict(self.meta["features"]))

    def reset(self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int) -> None:
        if self.check_visibility:
            from budget_envs.integrations.common import check_trained_visibility

            check_trained_visibility(self.name, self.visibility, info)
        if self._module is None:
            self._load()
        self._featurizer.reset(info.get("goal", ""))
        self._featurizer.observe(observation)
        self._rng = np.random.default_rng([self.seed, int(seed) % 2**32])

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        from budget_envs.integrations.rllib.module import score_actions

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
        self._featurizer.record(action)
        self._featurizer.observe(observation)
