"""``BudgetMix/ToolUse-v0``: multi-turn tool calling over a generated SQLite back office.

The agent works a support ticket (cancel, re-address, annotate or return orders under a store
policy) by sending one OpenAI-style tool call per turn and finishes with ``submit``. The episode
is won when the final database equals the gold database (the gold program run on a copy of the
start state) and the answer is right.
"""

from __future__ import annotations

import functools
import json
import json.encoder as _json_encoder
import logging
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from budget_envs._util import UNSEEN_SPLIT, check_int, check_levels, check_split, split_seed
from budget_envs.core import TextAgentEnv
from budget_envs.env_options import BaseOptions
from budget_envs.envs.tooluse import oracle as orc
from budget_envs.envs.tooluse.calls import parse_action, parse_money
from budget_envs.envs.tooluse.candidates import CandidateCalls
from budget_envs.envs.tooluse.faults import FaultHooks, _down_message
from budget_envs.envs.tooluse.lru import BLOCK_CACHE_SIZE, LRUCache
from budget_envs.envs.tooluse.schemas import (
    TOOL_BY_NAME,
    TOOL_NAMES,
    TOOLS_SCHEMA,
    WRITE_TOOLS,
)
from budget_envs.envs.tooluse.tasks import LEVELS, Task, make_task
from budget_envs.envs.tooluse.tools import RowLog, ToolError, matches_gold, run_tool
from budget_envs.envs.tooluse.world import World, get_world
from budget_envs.info import Deferred

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ToolUseEnv"]

logger = logging.getLogger(__name__)

_INSTRUCTIONS = (
    "Work this ticket with the tools. Reply with exactly one tool call per message, as JSON: "
    '{"tool_calls": [{"name": "<tool>", "arguments": {...}}]}. Tool results come back as JSON; '
    "tools accept only ids shown by earlier results (or by the ticket). "
    f"Tools: {', '.join(TOOL_NAMES)} (schemas in info['tools'])."
)
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
if _json_encoder.c_make_encoder is not None:
    # The C encoder ``json.dumps`` builds at every call, built once: the same text for the
    # tool results (fresh trees of dicts, lists, str, int, float, None; no cycles to check).
    _C_ENCODE = _json_encoder.c_make_encoder(
        None,
        json.JSONEncoder().default,
        _json_encoder.encode_basestring_ascii,
        None,
        ":",
        ",",
        False,
        False,
        True,
    )

    def _ENCODE(result: Any) -> str:  # noqa: N802 - the module's encoder, as before
        return "".join(_C_ENCODE(result, 0))


_ID_WHAT = {
    "cus": "customer",
    "ord": "order",
    "itm": "item",
    "pay": "payment",
    "prd": "product",
    "cur": "cursor",
}


@functools.lru_cache(maxsize=8)
def _task_table(
    levels: tuple[int, ...], tasks_per_level: int, split: str
) -> tuple[tuple[str, ...], dict[str, int]]:
    """The task ids of one configuration and their index, built once per process: building
    them (25,000 ids by default) took ~25 ms, most of a new env's first reset."""
    width = max(5, len(str(tasks_per_level - 1)))
    prefix = "" if split == "train" else f"{split}/"
    ids = tuple(f"{prefix}L{lv}-{i:0{width}d}" for lv in levels for i in range(tasks_per_level))
    return ids, {t: i for i, t in enumerate(ids)}


class ToolUseEnv(FaultHooks, CandidateCalls, TextAgentEnv):
    """Tool calling over an in-memory SQLite database, with an exact oracle.

    Args:
        level: 1 (3-4 calls) to 5 (about 25-45 calls), a list of levels, or None for every level.
        tasks_per_level: how many task ids each level lists.
        world_seed: the seed of the generated world (customers, orders, products).
        split: ``"train"`` (default: the world of ``world_seed``, ids ``L<level>-<index>``),
            ``"valid"`` or ``"test"``: held-out tasks in their own world, drawn from a seed
            derived from ``(world_seed, split)``, ids ``<split>/L<level>-<index>``;
            ``"test_unseen"``: the same, with tickets worded by request templates no other split
            uses and a request type of their own (a swap; see
            :data:`~budget_envs.envs.tooluse.tasks.TEMPLATES`).
        render_mode, max_action_length, max_observation_length: see :class:`TextAgentEnv`.

    Example:
        >>> from budget_envs.envs.tooluse import ToolUseEnv
        >>> env = ToolUseEnv(level=2)
        >>> obs, info = env.reset(seed=0)
        >>> info["task_id"], env.cost_to_go()
        ('L2-04253', 7)
        >>> env.oracle_actions()[0]
        '{"tool_calls":[{"name":"find_customer","arguments":{"email":"pia.mensah31@example.com"}}]}'
        >>> obs, reward, terminated, truncated, info = env.step(env.oracle_actions()[0])
        >>> env.cost_to_go(), reward, info["invalid_action"]
        (6, 0.0, False)
    """

    oracle_exact = True
    native_snapshot = True

    def __init__(
        self,
        *,
        level: int | Sequence[int] | None = None,
        tasks_per_level: int = 5000,
        world_seed: int = 0,
        split: str = "train",
        **base: Unpack[BaseOptions],
    ) -> None:
        super().__init__(**base)
        self.levels = check_levels(level, sorted(LEVELS))
        self.tasks_per_level = check_int("tasks_per_level", tasks_per_level, lo=1, hi=10**6)
        self.split = check_split(split, extra=(UNSEEN_SPLIT,))
        #: The seed of the world this env plays (``world_seed`` itself on the train split).
        self.world_seed = split_seed(
            check_int("world_seed", world_seed, lo=0, hi=2**32 - 1), self.split
        )
        self._world: World | None = None
        # The episode's own database: a copy of the start state made at its first write (or
        # first use that needs it); until then ``_fresh`` and reads go to the world's template,
        # which holds the same rows and stays warm in the caches for every env of the process.
        self._own = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._fresh = True
        self._task: Task | None = None
        self._gold: orc.Gold | None = None
        self._pr = orc.Progress()
        #: (task, what was shown, calls): the last :meth:`candidate_actions`, reused while
        #: neither changes.
        self._candidates: tuple[Task, tuple, tuple[str, ...]] | None = None
        #: (:meth:`_shown_key`, digest): the last :meth:`_state_digest`, reused while the key
        #: is equal.
        self._digest: tuple[tuple, str] | None = None
        #: :meth:`_shown_key` while :meth:`current_info` runs (else None).
        self._quick: tuple | None = None
        #: {(id, context, quoted texts): (call texts, amounts)}: the calls a shown id adds, a
        #: pure function of the key in this env's world, so kept across episodes; at most
        #: :data:`~budget_envs.envs.tooluse.lru.BLOCK_CACHE_SIZE` (least recently used go first).
        self._blocks = LRUCache(BLOCK_CACHE_SIZE)
        self._score = 0.0
        # Permanent faults: tools that are down, read tools that answer from the start state.
        self._down: frozenset[str] = frozenset()
        self._stale: frozenset[str] = frozenset()

    # ------------------------------------------------------------------ tasks
    @property
    def task_ids(self) -> Sequence[str]:
        """``"L<level>-<index>"`` for every level selected, ``tasks_per_level`` each."""
        return _task_table(self.levels, self.tasks_per_level, self.split)[0]

    def _task_index(self) -> dict[str, int]:
        return _task_table(self.levels, self.tasks_per_level, self.split)[1]

    def task_identity(self, task_id: str) -> tuple:
        """The world's seed and the ticket's requests (customers, orders, operations)."""
        if task_id not in self._task_index():
            raise ValueError(f"unknown task {task_id!r}; e.g. {list(self.task_ids[:3])!r}")
        task = make_task(self.world, task_id)
        return (self.world.seed, task.level, task.emails, task.given_orders, task.ops)

    def _snapshot_scope(self) -> tuple:
        """The world (its seed): a task id names another task in another world."""
        return (("world_seed", self.world_seed),)

    def task_level(self, task_id: str) -> int:
        """The difficulty level of ``task_id`` (the stratum of ``budgetmix eval --tasks N``)."""
        head = task_id.rpartition("/")[2].split("-", 1)[0] if isinstance(task_id, str) else ""
        if not (head[:1] == "L" and head[1:].isdigit()):
            raise ValueError(f"unknown task {task_id!r}; e.g. {list(self.task_ids[:3])!r}")
        return int(head[1:])

    @property
    def world(self) -> World:
        """The generated world (built once per process)."""
        if self._world is None:
            self._world = get_world(self.world_seed)
        return self._world

    @property
    def task(self) -> Task | None:
        """The current task (ticket, gold slots, gold program), or None before reset."""
        return self._task

    def _load(self, task_id: str) -> str:
        world = self.world
        self._task = make_task(world, task_id)
        self._gold = orc.Gold(world, self._task)
        self._fresh = True  # copied at the first write
        self._rows = RowLog()
        self._pr = orc.Progress(revealed=set(self._task.given_orders))
        self._score = 0.0
        self._down = self._stale = frozenset()
        return f"{self._task.ticket}\n\n{_INSTRUCTIONS}"

    def _goal(self) -> str:
        return "" if self._task is None else self._task.ticket

    def _admissible(self) -> tuple[str, ...]:
        return TOOL_NAMES  # the info's list is made from it

    def current_info(self, invalid: bool = False) -> dict[str, Any]:
        # the candidate calls and the state digest both check the same cheap key: made once
        self._quick = self._shown_key()
        try:
            return super().current_info(invalid)
        finally:
            self._quick = None

    def _extra_info(self) -> dict[str, Any]:
        out = {"tools": TOOLS_SCHEMA, "score": self._score}
        if self._task is None or self._done:
            out["candidate_actions"] = []
            return out
        # Building the calls of a new state (about 60% of a step on fresh tasks) waits until
        # the info is read; what they depend on is captured now, so a later step changes nothing.
        found = self._known_candidates()
        if isinstance(found, list):
            out["candidate_actions"] = found
        else:
            out["candidate_actions"] = Deferred(functools.partial(self._build_candidates, *found))
        return out

    # ------------------------------------------------------------------ stepping
    @property
    def _conn(self) -> sqlite3.Connection:
        """The episode's database, copied from the start state now if it has not been yet."""
        if self._fresh:
            self.world.copy_into(self._own)
            self._fresh = False
        return self._own

    def _execute(self, action: str) -> tuple[str, float]:
        name, args = parse_action(action)
        return self._run(name, args)

    def _check_visible(self, name: str, args: dict) -> None:
        pr = self._pr
        for p in TOOL_BY_NAME[name].params:
            value = args.get(p.name)
            if p.kind == "id" and value is not None and value not in pr.revealed:
                raise ToolError(
                    f"Error: unknown {_ID_WHAT[p.prefix]} id {value}. Use ids shown by earlier "
                    "tool results or by the ticket."
                )
        if name == "exchange_item":
            model = self.world.products[args["new_product_id"]].model
            if model not in pr.listed:
                raise ToolError(
                    f"Error: check stock with list_variants before exchanging for "
                    f"{args['new_product_id']}."
                )

    def _run(
        self, name: str, args: dict, conn: sqlite3.Connection | None = None
    ) -> tuple[str, float]:
        """Run a call on the episode's database (``conn`` None) or on ``conn`` (a stale read
        on the start-of-episode template)."""
        if name == "submit":
            return self._submit(args["answer"])
        if name in self._down:
            return _down_message(name), 0.0
        if name in self._stale:
            conn = self.world.template
        try:
            self._check_visible(name, args)
            if conn is not None:
                result = run_tool(conn, self.world, name, args)
            elif self._fresh and name not in WRITE_TOOLS:
                # nothing written yet: the start state answers, as the copy would
                result = run_tool(self.world.template, self.world, name, args)
            else:
                result = self._rows.run(self._conn, self.world, name, args)
        except ToolError as exc:
            return str(exc), 0.0
        self._apply(name, args)
        return _ENCODE(result), 0.0

    def _apply(self, name: str, args: dict) -> None:
        orc.apply_call(self.world, self._pr, name, args)
        if name in WRITE_TOOLS:
            self.lost = orc.is_lost(self._gold, self._pr) or self._needs_down_tool()
            self._score = orc.score(self._gold, self._pr, False)

    def _needs_down_tool(self) -> bool:
        """Whether every way to success calls a tool that is down (the task is then lost)."""
        return bool(self._down) and bool(self._down & orc.needed_tools(self._gold, self._pr))

    def _submit(self, answer: str) -> tuple[str, float]:
        pr = self._pr
        pr.submitted = True
        cents = parse_money(answer)
        pr.answer_ok = cents is not None and cents == self._task.answer_cents
        db_ok = self._db_matches_gold()
        model_ok = not orc.diff_slots(self._gold, pr)
        if db_ok != model_ok:  # would be a bug in the oracle model; the database decides
            logger.error(
                "tooluse: database check %s but model %s on %s", db_ok, model_ok, self._task.task_id
            )
        self.won = db_ok and pr.answer_ok
        self.lost = not self.won
        self._score = orc.score(self._gold, pr, self.won)
        if self.won:
            return (
                "Submitted. The ticket is resolved: every change matches and the answer is right.",
                1.0,
            )
        missing = sum(1 for s, v in self._gold.slots.items() if orc.current(self.world, pr, s) != v)
        wrong = sum(1 for s, v in pr.changed.items() if v != self._gold.value(s))
        return (
            f"Submitted. The ticket is not resolved: {missing} required change(s) missing or "
            f"wrong, {wrong} wrong change(s), answer {'right' if pr.answer_ok else 'wrong'}.",
            0.0,
        )

    def gold_connection(self) -> sqlite3.Connection:
        """A fresh database holding the gold end state: the gold program run on the start state."""
        world = self.world
        gold = sqlite3.connect(":memory:", isolation_level=None)
        world.copy_into(gold)
        for name, args in self._task.gold_calls:
            run_tool(gold, world, name, dict(args))
        return gold

    def _db_matches_gold(self) -> bool:
        """Whether the database equals the gold end state: the rows this episode's writes and
        the gold program's writes touched are compared (refund rows included), see
        :func:`~budget_envs.envs.tooluse.tools.matches_gold`."""
        return matches_gold(self._conn, self.world, self._rows, self._task.gold_calls)

    # ------------------------------------------------------------------ oracle
    def _oracle_actions(self) -> list[str]:
        """Every tool call (as action text) that lowers ``cost_to_go()`` by one."""
        return orc.oracle_calls(self._gold, self._pr, self.won)

    def _cost_to_go(self) -> int:
        """Fewest turns to success (the core answers 0 once won, UNREACHABLE once lost)."""
        return orc.cost_to_go(self._gold, self._pr, self.won)

    # ------------------------------------------------------------------ snapshots
    def _snapshot_state(self) -> Any:
        copy_conn = None  # nothing written: the start state, copied again at the first write
        if not self._fresh:
            copy_conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._own.backup(copy_conn)
        return (
            copy_conn,
            self._task,
            self._pr.copy(),
            self.won,
            self.lost,
            self._score,
            self._rows.copy(),
            self._down,
            self._stale,
        )

    def _restore_state(self, payload: Any) -> None:
        copy_conn, task, pr, won, lost, score, rows, self._down, self._stale = payload
        if copy_conn is None:
            self._fresh = True
        else:
            copy_conn.backup(self._own)
            self._fresh = False
        self._rows = rows.copy()
        if task is not self._task:
            self._task = task
            self._gold = orc.Gold(self.world, task)
        self._pr = pr.copy()
        self.won, self.lost, self._score = won, lost, score

    def close(self) -> None:
        self._own.close()
        super().close()

    def _state_digest(self) -> str:
        """Database rows changed since the start, ids shown, pages read, models listed, submit,
        and the permanent faults' effects (tools down, tools serving stale reads).

        Incremental: the rows come from the episode's :class:`RowLog`, not from reading tables;
        and reused while :meth:`_shown_key` is equal.
        """
        key = self._quick or self._shown_key()
        memo = self._digest
        if memo is not None and memo[0] == key:
            return memo[1]
        pr = self._pr
        digest = "\x1e".join(
            (
                self._rows.text(),
                ",".join(sorted(pr.revealed)),
                ",".join(f"{c}={n}" for c, n in sorted(pr.pages_seen.items())),
                ",".join(sorted(pr.listed)),
                f"{int(pr.submitted)}{int(pr.answer_ok)}",
                ",".join(sorted(self._down)),
                ",".join(sorted(self._stale)),
            )
        )
        self._digest = (key, digest)
        return digest
