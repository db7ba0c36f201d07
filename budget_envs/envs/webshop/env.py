"""``BudgetMix/WebShop-v0``: WebShop-style shopping over real HTTP against the shop server.

The env holds no catalogue: every reset, step, snapshot and restore is an HTTP request (on a
kept-alive connection the envs of a process share,
:class:`~budget_envs.envs.webshop.client.ConnectionPool`) to the server at ``base_url``. Without
``base_url`` the env plays on its process's server for its catalogue
(:func:`~budget_envs.envs.webshop.server.acquire_server`: started on a free loopback port in a
background thread by the first such env, stopped when the last one closes), in a session of
its own; 1,024 envs of a process run one server and a connection per request in flight.

The env owns its episode, not the server: it keeps the session state of every answer, so when
the server no longer has its session (other clients' sessions pushed it out of the server's
session cap, or the server restarted) the env opens a new session from that state and sends
the request again; the agent sees an ordinary turn. Those requests are
:class:`~budget_envs.envs.webshop.session.ShopSession`'s; the fault hooks are
:class:`~budget_envs.envs.webshop.faults.FaultHooks`'s, both mixed into :class:`WebShopEnv`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from budget_envs._util import UNSEEN_SPLIT, check_int, check_levels, check_split, split_seed
from budget_envs.core import UNREACHABLE, TextAgentEnv
from budget_envs.env_options import BaseOptions
from budget_envs.envs.webshop.app import MAX_BODY
from budget_envs.envs.webshop.faults import FaultHooks
from budget_envs.envs.webshop.oracle import oracle
from budget_envs.envs.webshop.scoring import SCORING_MODES
from budget_envs.envs.webshop.session import ShopSession
from budget_envs.envs.webshop.tasks import LEVELS, Task
from budget_envs.errors import ActionRejected, WebShopServerError

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["WebShopEnv", "WebShopServerError"]

logger = logging.getLogger(__name__)

#: Largest action, as the JSON text a step request carries, that fits the shop's request body
#: limit with room for the rest of the request (a fault).
_ACTION_JSON_BYTES = MAX_BODY - 1024


_PRICE = re.compile(r",?\s*(?:and |with )?(?:a total )?price lower than [0-9.]+ dollars:?")
_ITEM = re.compile(
    r"^(?:i need |i want |i am looking for )?(?:an? |some |the )?(.+?) that (?:is|are) (.+?)"
    r"(?:, in (.+))?$"
)
_LIST = re.compile(r",\s*|\s+and\s+")


def goal_queries(goal: str) -> list[str]:
    """Search queries made of a goal's own words and phrases, in a fixed order.

    Example:
        >>> goal_queries("i need a shampoo that is tea tree and paraben free, in 8 fl oz size, "
        ...              "and price lower than 20.00 dollars")[:2]
        ['tea tree paraben free shampoo', 'shampoo']
    """
    text = " ".join(_PRICE.sub("", goal.lower()).split())
    parts = [p.strip(" ;,.") for p in re.split(r"\(\d+\)", text)]
    clauses = parts[1:] if len(parts) > 1 else parts
    out: list[str] = []
    for clause in clauses:
        match = _ITEM.match(clause)
        if match:
            noun, attrs, options = match.group(1), match.group(2), match.group(3) or ""
            words = " ".join(w for w in _LIST.split(attrs) if w)
            opts = " ".join(w for w in _LIST.split(options) if w)
            out += [f"{words} {noun}", noun, f"{words} {noun} {opts}".strip()]
        out.append(clause)
    out.append(text)
    return [q for q in dict.fromkeys(" ".join(q.split()) for q in out) if q]


class WebShopEnv(FaultHooks, ShopSession, TextAgentEnv):
    """Find and buy the product(s) the instruction describes with ``search[...]``/``click[...]``.

    Args:
        level: difficulty 1-5 (see :mod:`budget_envs.envs.webshop.tasks`), a list of levels, or
            None for all five.
        tasks_per_level: how many task ids each level offers (``"L<level>-<index>"``).
        catalogue_seed: seed of the generated catalogue (the server's ``--seed``).
        split: ``"train"`` (default: the catalogue of ``catalogue_seed``, ids
            ``L<level>-<index>``), ``"valid"`` or ``"test"``: held-out tasks on their own
            catalogue, whose seed is derived from ``(catalogue_seed, split)`` (``env.catalogue_seed``
            holds it: a running server for a held-out split is started with that seed), ids
            ``<split>/L<level>-<index>``; ``"test_unseen"``: the same, on a catalogue that adds
            product types of two categories no other catalogue has
            (:data:`~budget_envs.envs.webshop.catalogue.UNSEEN_TYPES`), every goal one of them
            (a running server for it is started with ``--unseen-types``).
        num_products: catalogue size of an own server (a running server decides its own).
        scoring: ``"exact"`` (default) or ``"webshop"`` (WebShop's fuzzy semantics).
        base_url: a running shop server (``budgetmix serve-web``); None plays on this process's
            server for the catalogue (started by the first env that needs it).
        host: interface of an own server (loopback by default).
        timeout: seconds to wait for any HTTP answer.

    The reward is WebShop's purchase score on the buying step (0 elsewhere); success is a
    score of 1.0. ``info["score"]`` holds the score so far, ``info["purchase"]`` the purchase
    record in WebShop's field names once bought.

    Example:
        >>> import gymnasium as gym
        >>> import budget_envs
        >>> env = gym.make("BudgetMix/WebShop-v0", level=1)  # the process's server, on loopback
        >>> obs, info = env.reset(seed=0)
        >>> env.unwrapped.base_url
        'http://127.0.0.1:...'
        >>> info["goal"]
        'i need a beef jerky that is ready to eat, certified organic, kosher and plant based, and price lower than 30.00 dollars'
        >>> env.unwrapped.oracle_actions()[0], env.unwrapped.cost_to_go()
        ('search[mimoo elite plant based beef jerky]', 3)
        >>> obs, reward, terminated, truncated, info = env.step("search[plant based beef jerky]")
        >>> obs[:80], info["budget"]
        ('WebShop [SEP] Instruction: [SEP] i need a beef jerky that is ready to eat, certi', {'limit': 40, 'used': 1, 'remaining': 39})
        >>> env.step("fly away")[4]["invalid_action"]
        True
        >>> env.close()
    """

    oracle_exact: ClassVar[bool] = True
    native_snapshot: ClassVar[bool] = True

    def __init__(
        self,
        *,
        level: int | Sequence[int] | None = None,
        tasks_per_level: int = 1000,
        catalogue_seed: int = 0,
        split: str = "train",
        num_products: int = 10_000,
        scoring: str = "exact",
        base_url: str | None = None,
        host: str = "127.0.0.1",
        timeout: float = 30.0,
        **base: Unpack[BaseOptions],
    ) -> None:
        super().__init__(**base)
        levels = check_levels(level, LEVELS)
        tasks_per_level = check_int("tasks_per_level", tasks_per_level, lo=1, hi=10_000)
        num_products = check_int("num_products", num_products, lo=1000)
        catalogue_seed = check_int("catalogue_seed", catalogue_seed)
        self.split = check_split(split, extra=(UNSEEN_SPLIT,))
        catalogue_seed = split_seed(catalogue_seed, self.split)
        #: Whether the catalogue holds the held-out product types (``split="test_unseen"``).
        self.unseen_types = self.split == UNSEEN_SPLIT
        if scoring not in SCORING_MODES:
            raise ValueError(f"scoring must be one of {SCORING_MODES}, got {scoring!r}")
        if base_url is not None and (
            not isinstance(base_url, str) or not base_url.startswith(("http://", "https://"))
        ):
            raise ValueError(f"base_url must be an http(s) URL or None, got {base_url!r}")
        if not isinstance(host, str) or not host:
            raise ValueError(f"host must be a non-empty string, got {host!r}")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number, got {timeout!r}")
        self.levels = levels
        self.tasks_per_level = int(tasks_per_level)
        self.catalogue_seed = int(catalogue_seed)
        self.num_products = int(num_products)
        self.scoring = scoring
        self.host = host
        self.timeout = float(timeout)
        self._given_url = base_url.rstrip("/") if base_url else None
        self._server = None
        self._finalizer = None
        self._http = None
        self._sid: str | None = None
        self._task: Task | None = None
        self._tasks: dict[str, Task] = {}
        self._state: dict[str, Any] = {}
        self._admissible_now: list[str] = []
        self._view = ""
        self._score = 0.0
        self._purchase: dict[str, Any] | None = None
        #: (instruction, its search candidates): :func:`goal_queries` (about 0.1 ms) made once
        #: per task, not at every step that offers a search.
        self._searches: tuple[str, tuple[str, ...]] = ("", ())
        prefix = "" if self.split == "train" else f"{self.split}/"
        self._ids = tuple(
            f"{prefix}L{lv}-{i:04d}" for lv in levels for i in range(self.tasks_per_level)
        )

    # ---------------------------------------------------------------- TextAgentEnv hooks
    @property
    def task_ids(self) -> Sequence[str]:
        """``L<level>-<index>`` for every configured level and index."""
        return self._ids

    def task_level(self, task_id: str) -> int:
        """The difficulty level of ``task_id`` (the stratum of ``budgetmix eval --tasks N``)."""
        head = task_id.rpartition("/")[2].split("-", 1)[0] if isinstance(task_id, str) else ""
        if not (head[:1] == "L" and head[1:].isdigit()):
            raise ValueError(f"unknown task {task_id!r}; e.g. {list(self.task_ids[:3])!r}")
        return int(head[1:])

    def _load(self, task_id: str) -> str:
        if self._server is not None and not self._server.alive:
            logger.warning("the web shop server at %s died; restarting it", self._server.base_url)
            self.restart_server()
        self._session()
        data = None
        if self._sid is not None:  # reuse the session: one request per reset
            body = {
                "task_id": task_id,
                "scoring": self.scoring,
                "with_task": task_id not in self._tasks,
            }
            try:
                data = self._request("PUT", f"/api/sessions/{self._sid}", json=body, ok=(200, 404))
            except WebShopServerError:
                if self._server is None:
                    raise
                logger.warning("the web shop server at %s died; restarting it", self.base_url)
                self.restart_server()
                self._session()
            if data is not None and "state" not in data:  # 404: the session is gone
                data = None
        if data is None:
            self._sid = None
            data = self._request(
                "POST", "/api/sessions", json={"task_id": task_id, "scoring": self.scoring}
            )
            self._sid = data["sid"]
        if "task" in data:
            self._tasks[task_id] = Task.from_dict(data["task"])
        self._task = self._tasks[task_id]
        self._score = 0.0
        self._purchase = None
        self._apply(data)
        return self._view

    def _after(self, data: dict[str, Any]) -> float:
        self._apply(data)
        if data.get("done"):
            self._score = float(data["score"])
            self._purchase = data["purchase"]
            self.won = self._score >= 1.0
            self.lost = not self.won
            return self._score
        self._check_lost()
        return 0.0

    def _check_lost(self) -> None:
        """After a permanent fault a task can be lost before any purchase (its target sold out,
        or delisted and out of sight): then ``lost`` is set, as the contract's "lost for good"."""
        state = self._state
        if (state.get("out_of_stock") or state.get("delisted")) and not (self.won or self.lost):
            self.lost = oracle(self._task, state)[1] >= UNREACHABLE

    def _execute(self, action: str) -> tuple[str, float]:
        data = self._step_request(action)
        if data["invalid"]:
            raise ActionRejected(data["feedback"])
        reward = self._after(data)
        return self._view, reward

    def check_action(self, action: Any) -> str | None:
        """The core's checks, then the shop's request limit: an action whose step request would
        be over the server's body limit (non-ASCII text takes up to 12 bytes a character as
        JSON) is refused as a turn, where the server would answer 413."""
        problem = super().check_action(action)
        if problem is None and len(action) * 12 > _ACTION_JSON_BYTES:
            size = len(json.dumps(action))
            if size > _ACTION_JSON_BYTES:
                return (
                    f"Invalid action: it takes {size} bytes as JSON, over the shop's limit of "
                    f"{_ACTION_JSON_BYTES}. Send a shorter action."
                )
        return problem

    def _goal(self) -> str:
        return self._task.instruction if self._task is not None else ""

    def _admissible(self) -> list[str]:
        return list(self._admissible_now)

    def _extra_info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"score": self._score}
        out["candidate_actions"] = self.candidate_actions() if self._task is not None else []
        if self._purchase is not None:
            out["purchase"] = self._purchase
        return out

    def candidate_actions(self) -> list[str]:
        """The admissible actions with ``search[...]`` replaced by concrete queries
        (``info["candidate_actions"]``).

        The queries are built from the goal's words alone (:func:`goal_queries`): for each
        product the goal asks for, its attributes with its type noun, the noun alone, the
        attributes, noun and options, the whole request; and the goal without its price clause.
        Trainers with a finite action set (RLlib) choose among these; the oracle is not consulted.
        """
        self._require_reset()
        if self._done or self._task is None:
            return []
        out: list[str] = []
        for action in self._admissible_now:
            if action == "search[...]":
                out += self._search_candidates(self._task.instruction)
            else:
                out.append(action)
        return list(dict.fromkeys(out))

    def _search_candidates(self, instruction: str) -> tuple[str, ...]:
        if self._searches[0] != instruction:
            queries = tuple(f"search[{q}]" for q in goal_queries(instruction))
            self._searches = (instruction, queries)
        return self._searches[1]

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random admissible action; a search uses words of the instruction."""
        acts = self._admissible_now or ["click[back to search]"]
        action = acts[int(rng.integers(len(acts)))]
        if action == "search[...]" and self._task is not None:
            words = self._task.instruction.replace(",", " ").split()
            pick = sorted(rng.choice(len(words), size=min(4, len(words)), replace=False))
            action = "search[" + " ".join(words[i] for i in pick) + "]"
        return action

    # ---------------------------------------------------------------- oracle
    def _oracle_actions(self) -> list[str]:
        """Every optimal next action (one title query stands for all equally good searches)."""
        return oracle(self._task, self._state)[0]

    def _cost_to_go(self) -> int:
        """Fewest turns to a purchase scoring 1.0 (the core answers once won or lost)."""
        return oracle(self._task, self._state)[1]

    # ---------------------------------------------------------------- snapshots
    def _snapshot_state(self) -> dict[str, Any]:
        data = self._in_session("GET")
        return {
            "state": data["state"],
            "won": self.won,
            "lost": self.lost,
            "score": self._score,
            "purchase": self._purchase,
        }

    def _snapshot_scope(self) -> tuple:
        """The catalogue (its seed, the held-out types) and the scoring mode."""
        return (
            ("catalogue_seed", self.catalogue_seed),
            ("unseen_types", self.unseen_types),
            ("scoring", self.scoring),
        )

    def task_identity(self, task_id: str) -> tuple:
        """The catalogue's seed and every goal item (product, attributes, options, price bound)."""
        if task_id not in self._task_index():
            raise ValueError(f"unknown task {task_id!r}; e.g. {list(self.task_ids[:3])!r}")
        task = self._tasks.get(task_id)
        if task is None:
            task = Task.from_dict(self._request("GET", f"/api/tasks/{task_id}"))
            self._tasks[task_id] = task
        items = tuple(
            (
                it.asin,
                tuple(it.attributes),
                tuple(sorted(it.goal_options.items())),
                it.price_upper,
            )
            for it in task.items
        )
        return (self.catalogue_seed, items, task.spending_limit)

    def _restore_state(self, payload: dict[str, Any]) -> None:
        task_id = payload["state"]["task_id"]
        task = self._tasks.get(task_id)
        if task is None:
            task = Task.from_dict(self._request("GET", f"/api/tasks/{task_id}"))
        self._put_state(payload["state"])  # a new session when the env has none yet
        self._tasks[task_id] = self._task = task
        self.won, self.lost = bool(payload["won"]), bool(payload["lost"])
        self._score = float(payload["score"])
        self._purchase = payload["purchase"]

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """End the session and give back the server (the last env of the process stops it)."""
        if self._http is not None:
            if self._sid is not None and (self._server is None or self._server.alive):
                try:
                    self._http.request(
                        "DELETE", self.base_url, f"/api/sessions/{self._sid}", timeout=2
                    )
                except Exception:  # closing must not fail because the server is gone
                    logger.debug("could not delete the session", exc_info=True)
            self._http = None
        self._sid = None
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._server = None
        super().close()

    def _state_digest(self) -> str:
        """The shop session: page, query, results page, product and sub-page, options, cart,
        and what permanent faults did (out-of-stock and delisted products; left out while
        empty, so a fault-free state hashes as it always did)."""
        state = {
            k: v
            for k, v in self._state.items()
            if k != "sid" and not (k in ("out_of_stock", "delisted") and not v)
        }
        return json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
