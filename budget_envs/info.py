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


# ---------------------------------------------------------------------- values built when read
class Deferred:
    """A value of ``info`` that a family builds only when someone reads it (see :class:`LazyInfo`).

    ``build`` takes no argument and must not depend on the env's state at the time it is called:
    it captures what it needs when the info is made (a step after it does not change it).
    """

    __slots__ = ("build",)

    def __init__(self, build) -> None:
        self.build = build

    def __repr__(self) -> str:  # pragma: no cover - only seen by code that reads dict storage
        return "<value built when read>"


class LazyInfo(dict):
    """An ``info`` dict whose :class:`Deferred` values are built the first time they are read.

    A step's info may offer a value that costs more than the step (ToolUse's candidate calls on
    a fresh task: most of a step) and that many loops never read. Every way of reading the
    dict builds them first, in place (same keys, same order, same values as an eager dict):
    ``info[key]``, ``get``, iteration, ``keys``/``values``/``items``, ``len``, ``==``, ``repr``,
    ``copy``, ``dict(info)``, ``{**info}``, ``json.dumps``, ``pickle`` and ``copy.deepcopy``
    (the last two give a plain dict). Only code that reads a dict's storage directly from C,
    bypassing its methods, could see the placeholder.

    Example:
        >>> from budget_envs.info import Deferred, LazyInfo
        >>> calls = []
        >>> info = LazyInfo({"turn": 1, "actions": Deferred(lambda: calls.append(1) or ["a"])})
        >>> calls, "actions" in info
        ([], True)
        >>> info["actions"], info, calls
        (['a'], {'turn': 1, 'actions': ['a']}, [1])
    """

    __slots__ = ("_lazy",)

    def __init__(self, data=()) -> None:
        super().__init__(data)
        self._lazy = any(type(v) is Deferred for v in dict.values(self))

    def _build(self) -> None:
        if self._lazy:
            self._lazy = False
            for key, value in list(dict.items(self)):
                if type(value) is Deferred:
                    dict.__setitem__(self, key, value.build())

    def __getitem__(self, key):
        self._build()
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        self._build()
        return dict.get(self, key, default)

    def __iter__(self):
        self._build()
        return dict.__iter__(self)

    def __reversed__(self):
        self._build()
        return dict.__reversed__(self)

    def keys(self):
        self._build()
        return dict.keys(self)

    def values(self):
        self._build()
        return dict.values(self)

    def items(self):
        self._build()
        return dict.items(self)

    def __eq__(self, other):
        self._build()
        if isinstance(other, LazyInfo):
            other._build()
        return dict.__eq__(self, other)

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._build()
        return dict.__repr__(self)

    def copy(self) -> dict:
        self._build()
        return dict(dict.items(self))

    __copy__ = copy

    def __deepcopy__(self, memo) -> dict:
        import copy

        self._build()
        return copy.deepcopy(dict(dict.items(self)), memo)

    def __reduce_ex__(self, protocol):
        self._build()
        return (dict, (dict(dict.items(self)),))

    def __or__(self, other):
        self._build()
        return dict.__or__(dict(dict.items(self)), other)

    def __ror__(self, other):
        self._build()
        return dict.__or__(dict(other), dict(dict.items(self)))

    def pop(self, *args):
        self._build()
        return dict.pop(self, *args)

    def popitem(self):
        self._build()
        return dict.popitem(self)

    def setdefault(self, key, default=None):
        self._build()
        return dict.setdefault(self, key, default)
