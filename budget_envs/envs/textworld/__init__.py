"""TextWorld family: generated text games (custom quests, coin collector, treasure hunter, cooking).

``textworld`` itself is imported only when a game is first loaded (``pip install
"budget-envs[textworld]"``).
"""

from budget_envs.envs.textworld.env import (
    CoinCollectorEnv,
    CookingEnv,
    TextWorldEnv,
    TreasureHunterEnv,
)

__all__ = ["CoinCollectorEnv", "CookingEnv", "TextWorldEnv", "TreasureHunterEnv"]
