"""Every ``info`` key the suite emits, documented once.

Envs, wrappers and the evaluation harness all name their keys from this table; a test checks that
every key seen on any registered env is listed here, so a new key cannot slip in undocumented.
"""

from __future__ import annotations

#: The value of an int field of ``info`` that has nothing to say on this step (a first success
#: turn when the episode was not won, a cost-to-go without an oracle). Never ``None``: every
#: ``info`` value keeps one type across every episode of every id, so Gymnasium's vector envs
#: batch infos from any mix of envs (their batching makes one typed array per key). Turns are
#: 1-based and costs are >= 0, so -1 is never a real value. The run records (``budgetmix
#: eval``) write ``null`` for it, as before.
NO_TURN = -1

#: Every type an ``info`` value (or a value of an ``info`` dict, at any depth) may have.
#: Lists and tuples are batched as objects, so their items are free.
INFO_VALUE_TYPES = (bool, int, float, str, list, tuple, dict)

#: Keys every family puts in ``info`` on every ``reset`` and ``step``.
CORE_KEYS: dict[str, str] = {
    "task_id": "str: the id of the task being played (one of ``env.unwrapped.task_ids``).",
    "goal": "str: the task's goal in words, as the agent is told it.",
    "won": "bool: the task is solved. Implies ``terminated``.",
    "lost": "bool: the task can no longer be solved (e.g. an irreversible wrong action). "
    "Implies ``terminated``.",
    "admissible_actions": "list[str]: actions that are valid now (for tool use: the tool names; "
    "for the web shop, ``search[...]`` stands for any query). Not always sendable as they are: "
    "send ``candidate_actions``.",
    "candidate_actions": "list[str]: actions that can be sent as they are, in every family, "
    "built only from what the agent has been shown (text games: the admissible commands; tool "
    "use: every tool with the argument combinations shown so far, and for submit 0.00, the "
    "amounts shown and the sum of the refunds made; web shop: the admissible actions with "
    "search[...] replaced by queries made of the goal's words and phrases). On the states of an "
    "oracle episode they hold an oracle action. Never read from the oracle: a wrong action stays "
    "possible. Empty once the episode is over.",
    "invalid_action": "bool: the last action was rejected (empty, too long, control characters, "
    "unparseable, unknown command); the state is unchanged and the turn still counts.",
    "state_hash": "str: 32 hex digits, a stable hash of the semantic world state (positions, "
    "contents, carried objects, database rows, cart and page, revealed ids, a permanent fault's "
    "effect; not the turn count, the history or RNG states). Equal states reached by different "
    "action paths hash equal, in any process and under any PYTHONHASHSEED; an invalid action "
    "leaves it unchanged; resets of the same task start from the same hash.",
}

#: Keys a family may add. Named the same in every family that has them.
FAMILY_KEYS: dict[str, str] = {
    "score": "float in [0, 1]: a partial score for families that document one (1.0 on success).",
    "tools": "list[dict]: the OpenAI tools schema (tool use).",
    "purchase": "dict: the purchase record in WebShop's field names (web shop, at buy).",
    "turn": "int: actions executed by the bare env since reset (invalid ones included).",
    "action_alias": "str: the command that ran when the agent's action was an accepted alias "
    "(ALFWorld: alfworld 0.3's ``put X in/on Y`` runs as ``move X to Y``); only on that turn.",
    "gamefile": "str: path of the game file being played (ALFWorld: the game.tw-pddl file).",
}

#: Keys added by the wrappers in :mod:`budget_envs.wrappers`.
WRAPPER_KEYS: dict[str, str] = {
    "budget": 'dict {"limit", "used", "remaining"}: the turn budget of this episode (BudgetWrapper, '
    "every reset and step).",
    "episode_summary": 'dict {"limit", "used", "won", "first_success_turn", "stop_reason"}: on the '
    "step that ends the episode (terminated or truncated) (BudgetWrapper). ``first_success_turn`` "
    'is -1 (``NO_TURN``) when not won; ``stop_reason`` is "" when the env ended the episode '
    "without a reason.",
    "stop_reason": 'str on the last step of an episode only: "won" or "lost" (the env, on the step '
    'that terminates) or "budget" (BudgetWrapper, on the step that truncates). The TRL rollout '
    "uses the same words and adds its own trainer-side reasons.",
    "fault": 'dict on a faulty turn only. The env\'s step sets {"kind", "action", "executed", '
    '"effect"}: the kind, the agent\'s action, the action that ran ("" when none did) and what '
    "the fault did (one of ``budget_envs.core.FAULT_EFFECTS``: replaced, dropped, observation, "
    'world, none); ErrorInjection adds "turn" (1-based), "cost_before" and "cost_after" (the '
    'oracle\'s cost-to-go around the fault, -1 without an oracle) and "cell" ([visibility, '
    "persistence], see ``env.unwrapped.fault_cells()``). See docs/faults.md.",
    "faults": "tuple[dict]: every fault of this episode so far (ErrorInjection, every reset and step).",
    "process_reward": "float: the potential-based progress signal of this turn (ProcessReward).",
}

ALL_KEYS: dict[str, str] = {**CORE_KEYS, **FAMILY_KEYS, **WRAPPER_KEYS}
