"""ALFWorld family: ``BudgetMix/ALFWorld-v0`` (see :class:`AlfWorldEnv`).

Importing this package is cheap: alfworld, textworld and Fast Downward load on first use.
"""

from __future__ import annotations

from budget_envs.envs.alfworld.env import AlfWorldEnv, collect_game_files, default_cache_dir

__all__ = ["AlfWorldEnv", "collect_game_files", "default_cache_dir"]
