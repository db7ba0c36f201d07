"""TRL integration: BudgetMix episodes for ``GRPOTrainer`` (the optional ``trl`` extra).

The code lives in the modules of this package; this module names what is public.
"""

from budget_envs.integrations.trl.generation import (
    STOP_REASONS,
    SYSTEM_PROMPT,
    TOOL_INSTRUCTION,
    BudgetExhausted,
    BudgetMixRollout,
    BudgetMixToolEnv,
    EpisodeOver,
    HFTurnGenerator,
    RolloutEpisode,
    VLLMTurnGenerator,
    action_from_reply,
    env_reward,
    load_policy,
    make_env,
    make_env_like,
    make_prompt_dataset,
    make_tool_dataset,
    oracle_examples,
    task_prompt,
    train,
)
from budget_envs.integrations.trl.generation import (
    _require as _require,  # the install check, for tests and callers that probe the extra
)

__all__ = [
    "BudgetExhausted",
    "BudgetMixRollout",
    "BudgetMixToolEnv",
    "EpisodeOver",
    "HFTurnGenerator",
    "RolloutEpisode",
    "STOP_REASONS",
    "SYSTEM_PROMPT",
    "TOOL_INSTRUCTION",
    "VLLMTurnGenerator",
    "action_from_reply",
    "env_reward",
    "make_env",
    "make_env_like",
    "load_policy",
    "make_prompt_dataset",
    "make_tool_dataset",
    "oracle_examples",
    "task_prompt",
    "train",
]
