"""RLlib integration: BudgetMix envs as action-scoring envs for PPO (the ``rllib`` extra).

:class:`MaskedTextEnv` offers every action a state has as one row of its observation, and
:class:`ActionScoringTorchModule` scores every row with one shared network (DRRN-style action as
input), so a policy plays any number of offered actions. Training end to end (warm start on the
oracle, PPO, the policy folder) is :func:`train`, configured by one :class:`RLlibTrainConfig`;
a policy folder plays in the eval harness as ``--agent NAME=policy:DIR``
(:class:`~budget_envs.integrations.rllib.agent.RLlibPolicy`).

The modules, each importing only those above it in this list:

=================  ============================================================================
``features``       what a policy sees: :class:`FeatureSpec`, :class:`Featurizer` (no torch, no ray)
``env``            :class:`MaskedTextEnv`, :func:`env_creator`, :func:`register`,
                   :func:`ppo_config`
``module``         :class:`ActionScoringTorchModule` and :class:`BudgetMetricsCallback` (imports
                   torch and RLlib: reached lazily, through this package's attributes)
``weights``        the module as ``module.safetensors`` plus JSON: saved and loaded without pickle
``coverage``       how much of a family a policy restricted to the offered actions can play
``warmstart``      the behaviour-cloning warm start from the env's oracle
``config``         :class:`RLlibTrainConfig`: every setting of a training run
``training``       :func:`train`: warm start, PPO, the policy folder
``agent``          :class:`~budget_envs.integrations.rllib.agent.RLlibPolicy`: a folder, played
=================  ============================================================================

``import budget_envs`` never imports ray or torch, and neither does importing this package: they
load inside the functions.
"""

from typing import Any

from budget_envs.integrations.common import make_env
from budget_envs.integrations.rllib.config import RLlibTrainConfig
from budget_envs.integrations.rllib.env import (
    DEFAULT_ENV_NAME,
    INFO_KEYS,
    MINIBATCH_SIZE,
    SYNC_REQUESTS_IN_FLIGHT,
    MaskedTextEnv,
    _require,
    check_minibatch,
    env_creator,
    ppo_config,
    register,
)
from budget_envs.integrations.rllib.features import (
    FeatureSpec,
    Featurizer,
    TooManyActions,
    hash_features,
)
from budget_envs.integrations.rllib.training import train

__all__ = [
    "DEFAULT_ENV_NAME",
    "INFO_KEYS",
    "MINIBATCH_SIZE",
    "SYNC_REQUESTS_IN_FLIGHT",
    "ActionScoringTorchModule",
    "BudgetMetricsCallback",
    "FeatureSpec",
    "Featurizer",
    "MaskedTextEnv",
    "RLlibTrainConfig",
    "TooManyActions",
    "check_minibatch",
    "env_creator",
    "hash_features",
    "make_env",
    "ppo_config",
    "register",
    "score_actions",
    "train",
]

#: Names of :mod:`~budget_envs.integrations.rllib.module`, which imports torch and RLlib.
_LAZY = {"ActionScoringTorchModule", "BudgetMetricsCallback", "score_actions"}


def __getattr__(name: str) -> Any:
    # The module class subclasses RLlib's torch module, so it is imported on first access.
    if name in _LAZY:
        _require()
        from budget_envs.integrations.rllib import module

        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
