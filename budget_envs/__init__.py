"""budget-envs: Gymnasium text-agent environments under a turn budget.

``import budget_envs`` registers every ``BudgetMix/*`` id with Gymnasium::

    import gymnasium as gym
    import budget_envs

    env = gym.make("BudgetMix/ToolUse-v0", budget=(10, 30), visibility="remaining")

Heavy family dependencies (textworld, alfworld) load only when their env is built.
"""

from __future__ import annotations

from budget_envs.core import Snapshot, TextAgentEnv
from budget_envs.errors import ActionRejected, BudgetEnvsError
from budget_envs.registry import register_envs

__all__ = [
    "ActionRejected",
    "BudgetEnvsError",
    "Snapshot",
    "TextAgentEnv",
    "register_envs",
    "__version__",
]
__version__ = "0.1.0"

register_envs()
