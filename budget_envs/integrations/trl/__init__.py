"""TRL integration: BudgetMix episodes for ``GRPOTrainer`` (the optional ``trl`` extra).

Two ways in, both with the turn budget drawn per episode by the :class:`BudgetWrapper`:

* :class:`BudgetMixRollout` is a ``rollout_func``: it plays one multi-turn episode per prompt,
  all the episodes of a batch together (one generation call per turn for every live episode),
  and returns the sampled token ids with the environment's tokenized turns appended
  (``env_mask`` 0 on those, so only the agent's tokens carry the loss), the sampling
  log-probabilities of exactly those ids, the episode's env reward (``env_reward``) and why it
  ended (``stop_reason``, one of :data:`STOP_REASONS`).
* :class:`BudgetMixToolEnv` is an ``environment_factory`` class: TRL runs the generation loop
  and calls its tools (``act(command)`` for text envs; one typed method per tool for the tool-use
  family); at truncation a tool raises :class:`BudgetExhausted`, which TRL hands back to the
  model as a tool error.

A turn is one env step everywhere: one reply of the rollout, one tool call of the tool adapter,
one ``act`` of an eval agent. In the tool-use family one turn is one tool call (the env rejects a
message with several calls as an invalid turn), in training and in evaluation alike.

Training end to end (warm start, GRPO, checkpoint, evaluation) is :func:`train`; a checkpoint
plays in the eval harness as :class:`PolicyAgent` (:func:`load_policy`).

The modules, each importing only those above it in this list:

=================  ============================================================================
``base``           the extra's install check (``_require``) and seed derivation (``_seed``)
``dialogue``       prompts, observations and replies as text, and as token ids with loss masks
``decoding``       the pieces of the generator's own decoding loop (cache, sampling)
``generation``     the generation back ends: :class:`HFTurnGenerator`, :class:`VLLMTurnGenerator`
``scoring``        acting by scoring the offered actions (``actions="score"``)
``rollout``        :class:`BudgetMixRollout` (the ``rollout_func``) and :func:`env_reward`
``tool_env``       :class:`BudgetMixToolEnv` (the ``environment_factory`` class)
``data``           the datasets of both ways in, and oracle episodes for a warm start
``policy``         the policy folder: written by ``save_policy``, played by :class:`PolicyAgent`
``training``       :func:`train`: warm start, GRPO, the policy folder
=================  ============================================================================

``import budget_envs`` never imports torch or trl, and neither does importing this package: they
load inside the functions.
"""

from budget_envs.errors import BudgetExhausted, EpisodeOver
from budget_envs.integrations.common import make_env, make_env_like
from budget_envs.integrations.trl.base import _require as _require  # probed by tests
from budget_envs.integrations.trl.data import (
    TOOL_INSTRUCTION,
    make_prompt_dataset,
    make_tool_dataset,
    oracle_examples,
)
from budget_envs.integrations.trl.dialogue import (
    STOP_REASONS,
    SYSTEM_PROMPT,
    RolloutEpisode,
    action_from_reply,
    task_prompt,
)
from budget_envs.integrations.trl.generation import HFTurnGenerator, VLLMTurnGenerator
from budget_envs.integrations.trl.policy import POLICY_FILE, PolicyAgent, load_policy
from budget_envs.integrations.trl.rollout import BudgetMixRollout, env_reward
from budget_envs.integrations.trl.tool_env import BudgetMixToolEnv
from budget_envs.integrations.trl.training import train

__all__ = [
    "POLICY_FILE",
    "STOP_REASONS",
    "SYSTEM_PROMPT",
    "TOOL_INSTRUCTION",
    "BudgetExhausted",
    "BudgetMixRollout",
    "BudgetMixToolEnv",
    "EpisodeOver",
    "HFTurnGenerator",
    "PolicyAgent",
    "RolloutEpisode",
    "VLLMTurnGenerator",
    "action_from_reply",
    "env_reward",
    "load_policy",
    "make_env",
    "make_env_like",
    "make_prompt_dataset",
    "make_tool_dataset",
    "oracle_examples",
    "task_prompt",
    "train",
]
