"""Where :func:`train` and :class:`PolicyAgent` were imported from before the TRL integration
became the package :mod:`budget_envs.integrations.trl`; import them from there."""

from budget_envs.integrations.trl.policy import POLICY_FILE, PolicyAgent
from budget_envs.integrations.trl.training import train

__all__ = ["POLICY_FILE", "PolicyAgent", "train"]
