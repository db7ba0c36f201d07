"""The env contract every BudgetMix family implements: :class:`TextAgentEnv`.

A family subclasses :class:`TextAgentEnv` and fills in a handful of hooks (``task_ids``,
``_load``, ``_execute``, ``_goal``, ``_admissible``, the oracle's ``_oracle_actions`` and
``_cost_to_go``, ``_state_digest``); :func:`budget_envs.contract.check_family` checks a family
against every rule. The base class owns everything that must behave the same in every family:

* ``Text`` spaces over a printable charset (Gymnasium's default charset is alphanumeric only);
* task selection from ``options["task_id"]`` (an index or a string id) or from the seed;
* bad input as a turn: non-text, empty, over-long, control characters or anything the family's
  parser rejects gets feedback, ``info["invalid_action"] = True`` and leaves the state untouched;
* bounded observations that always stay inside the observation space;
* the ``info`` keys of :data:`budget_envs.info.CORE_KEYS`;
* the oracle's bookkeeping: ``oracle_actions()`` and ``cost_to_go()`` raise ``ResetNeeded``
  before reset and answer for a finished episode themselves, then call the family's hook;
* ``snapshot()`` / ``restore()`` by deterministic prefix replay unless the family has a native one
  (:class:`budget_envs.snapshot.Forking`);
  ``restore()`` of a snapshot from another env class, scope (``_snapshot_scope()``: a world
  seed...) or of a task this env lacks raises ``SnapshotMismatch`` and changes nothing;
* after ``close()``, ``step``, ``reset``, the oracle, ``snapshot`` and ``restore`` raise
  ``EnvClosed`` (a ``gymnasium.error.ClosedEnvironmentError``) in every family: a closed env
  does not reopen; ``close()`` again does nothing;
* one turn pipeline: every turn, faulty or not, is one ``step`` call. A fault is *armed* first
  (:meth:`TextAgentEnv.arm_fault`, which :class:`budget_envs.wrappers.ErrorInjection` reaches with
  ``get_wrapper_attr``); ``step`` then applies it (the generic kinds here, a family's kinds
  through the one hook ``_fault``), computes reward and ``terminated`` the normal way, records the
  event for replay and reports the effect in ``info["fault"]``. Every wrapper in between sees an
  ordinary ``step`` call and an ordinary 5-tuple.
  The fault taxonomy, :class:`FaultOutcome` and arming live in :mod:`budget_envs.env_faults`
  (:class:`~budget_envs.env_faults.FaultArming`, a mixin of the base class; names re-exported here).

Envs never truncate: turn limits belong to :class:`budget_envs.wrappers.BudgetWrapper`.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import error
from gymnasium.utils import seeding

from budget_envs.env_faults import (
    CELLS,
    FAULT_EFFECTS,
    GENERIC_CELLS,
    GENERIC_KINDS,
    PERSISTENCE,
    VISIBILITY,
    ArmedFault,
    FaultArming,
    FaultOutcome,
    garble_text,
)
from budget_envs.errors import ActionRejected, EnvClosed
from budget_envs.info import Deferred, LazyInfo
from budget_envs.snapshot import Forking, Snapshot
from budget_envs.spaces import MAX_TEXT_LENGTH, PRINTABLE, AgentText, text_space

__all__ = [
    "CELLS",
    "FAULT_EFFECTS",
    "GENERIC_CELLS",
    "PERSISTENCE",
    "STOP_REASONS",
    "VISIBILITY",
    "GENERIC_KINDS",
    "MAX_TEXT_LENGTH",
    "PRINTABLE",
    "UNREACHABLE",
    "AgentText",
    "ArmedFault",
    "FaultOutcome",
    "Snapshot",
    "TextAgentEnv",
    "garble_text",
    "text_space",
]

_OUTSIDE_CHARSET = re.compile(r"[^\x20-\x7e\t\n\r\x0b\x0c]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

#: What ``cost_to_go()`` returns once the task can no longer be solved (``lost``).
UNREACHABLE = 10**6

#: Room left at the end of every observation for lines that wrappers append (the budget line).
WRAPPER_RESERVE = 256


#: ``info["stop_reason"]`` on the last step of an episode (the env says won or lost, the
#: BudgetWrapper says budget; trainer integrations may add their own reasons).
STOP_REASONS: tuple[str, ...] = ("won", "lost", "budget")


class TextAgentEnv(Forking, FaultArming, gym.Env[str, str]):
    """Base class of every BudgetMix environment (see the module docstring for the contract).

    Subclasses implement:

    * ``task_ids`` (property): every task id this env can play, in a fixed order;
    * ``_load(task_id) -> str``: set up the task and return the first observation;
    * ``_execute(action) -> (observation, reward)``: apply a validated action; raise
      :class:`~budget_envs.errors.ActionRejected` (before any change) to reject it; set
      ``self.won`` / ``self.lost``;
    * ``_goal() -> str`` and ``_admissible() -> list[str]``;
    * the oracle hooks ``_oracle_actions()`` and ``_cost_to_go()``, which the public
      :meth:`oracle_actions` / :meth:`cost_to_go` call after checking reset and the end of the
      episode; set the class attribute ``oracle_exact``;
    * ``_state_digest()``: what ``info["state_hash"]`` hashes;
    * ``task_identity(task_id)`` when the family takes ``split=``.

    Optional: ``task_level()``, ``_extra_info()``, ``fault_kinds()`` with ``family_fault_cells``
    and the one fault hook ``_fault()``, ``slip_action()``, ``no_effect_feedback()``, and a
    native ``_snapshot_state()`` / ``_restore_state()``. :func:`budget_envs.contract.check_family`
    checks a family against every rule (docs/extending.md lists them).

    Example:
        The contract on a real family: bad input is a turn with feedback, and a snapshot forks the
        episode.

        >>> from budget_envs.envs.tooluse import ToolUseEnv
        >>> env = ToolUseEnv(level=1)
        >>> obs, info = env.reset(seed=0)
        >>> sorted(info)
        ['admissible_actions', 'candidate_actions', 'goal', 'invalid_action', 'lost', 'score', 'state_hash', 'task_id', 'tools', 'turn', 'won']
        >>> obs, reward, terminated, truncated, info = env.step("")
        >>> obs
        'Invalid action: the action is empty. Send a command.'
        >>> info["invalid_action"], terminated, truncated
        (True, False, False)
        >>> snap = env.snapshot()
        >>> first = env.step(env.oracle_actions()[0])[0]
        >>> env.restore(snap)  # returns the observation of the snapshot's state
        'Invalid action: the action is empty. Send a command.'
        >>> env.step(env.oracle_actions()[0])[0] == first
        True
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    #: Whether ``oracle_actions()`` / ``cost_to_go()`` are exact (True) or a documented heuristic.
    oracle_exact: ClassVar[bool] = True
    #: Default bounds on action and observation length, in characters: the same in every family
    #: (:data:`MAX_TEXT_LENGTH`), so every id has the same spaces.
    default_max_action_length: ClassVar[int] = MAX_TEXT_LENGTH
    default_max_observation_length: ClassVar[int] = MAX_TEXT_LENGTH
    #: Whether the family keeps a native snapshot (``_snapshot_state``); else prefix replay.
    native_snapshot: ClassVar[bool] = False
    #: The cell (visibility, persistence) of each of the family's own kinds, and of any generic
    #: kind whose cell differs in this family from :data:`GENERIC_CELLS`.
    family_fault_cells: ClassVar[dict[str, tuple[str, str]]] = {}

    def __init__(
        self,
        *,
        render_mode: str | None = None,
        max_action_length: int | None = None,
        max_observation_length: int | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, "
                f"got {render_mode!r}"
            )
        max_action_length = (
            self.default_max_action_length if max_action_length is None else max_action_length
        )
        max_observation_length = (
            self.default_max_observation_length
            if max_observation_length is None
            else max_observation_length
        )
        for name, value in (
            ("max_action_length", max_action_length),
            ("max_observation_length", max_observation_length),
        ):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if max_observation_length <= WRAPPER_RESERVE + 64:
            raise ValueError(
                f"max_observation_length must exceed {WRAPPER_RESERVE + 64}, "
                f"got {max_observation_length!r}"
            )
        self.render_mode = render_mode
        self.max_action_length = int(max_action_length)
        self.observation_space = text_space(int(max_observation_length))
        self.action_space = text_space(int(max_action_length))
        self._obs_limit = int(max_observation_length) - WRAPPER_RESERVE
        self._task_id: str | None = None
        self._last_obs = ""
        self._trace: list[tuple] = []
        self._reset_rng_state: dict | None = None
        self._done = False
        self.turn = 0
        self.won = False
        self.lost = False
        self._armed: ArmedFault | None = None
        #: (digest object, (task id, won, lost), hash): the last :meth:`state_hash`.
        self._hash_memo: tuple | None = None
        #: True while :meth:`restore` replays the trace (a fault hook that rolls its own turn
        #: back, such as a silent no-op, then has nothing to do).
        self.replaying = False
        #: Set by :meth:`close`; every later call but ``close`` raises :class:`EnvClosed`.
        self._closed = False

    # ------------------------------------------------------------------ hooks for families
    @property
    def task_ids(self) -> Sequence[str]:
        """Every task id this env can play, in a fixed order (``options["task_id"]`` indexes it)."""
        raise self._missing("the property task_ids")

    def task_identity(self, task_id: str) -> tuple:
        """What makes ``task_id`` the task it is, without its id: its world and goal.

        Two tasks with equal identities are the same task; held-out splits (``split=``) are
        disjoint by identity, not only by id. Computed without playing the task. Required of a
        family that takes ``split=``.
        """
        raise self._missing("task_identity(task_id) -> tuple")

    def _load(self, task_id: str) -> str:
        raise self._missing("_load(task_id: str) -> str")

    def _execute(self, action: str) -> tuple[str, float]:
        raise self._missing("_execute(action: str) -> tuple[str, float]")

    def _goal(self) -> str:
        raise self._missing("_goal() -> str")

    def _admissible(self) -> list[str]:
        raise self._missing("_admissible() -> list[str]")

    def _extra_info(self) -> dict[str, Any]:
        """Family-specific ``info`` keys (each documented in :mod:`budget_envs.info`); a value
        may be a :class:`~budget_envs.info.Deferred`, built only when the info is read."""
        return {}

    def _snapshot_scope(self) -> tuple:
        """``(name, value)`` pairs that must match, besides the class, for a snapshot's task id to
        mean the same task here (e.g. ``(("world_seed", 0),)``); ``()``: the id alone decides."""
        return ()

    def _pick_task(self, rng: np.random.Generator) -> str:
        """The task an unconfigured reset plays; by default uniform over ``task_ids``."""
        ids = self.task_ids
        return ids[int(rng.integers(len(ids)))]

    def task_level(self, task_id: str) -> Any:
        """The level of ``task_id`` (``budgetmix eval --tasks N`` spreads N over the levels);
        None for every task of a family without levels (optional hook)."""
        return None

    # ------------------------------------------------------------------ oracle
    def oracle_actions(self) -> list[str]:
        """Every optimal next action from the current state; empty once the episode is over.

        Raises ``gymnasium.error.ResetNeeded`` before the first reset (:class:`EnvClosed` after
        ``close()``); then the family's hook ``_oracle_actions()`` answers for a live episode.
        """
        self._require_reset()
        if self._done:
            return []
        return list(self._oracle_actions())

    def cost_to_go(self) -> int:
        """The fewest turns from the current state to success (0 once won, UNREACHABLE once lost).

        Checks reset as :meth:`oracle_actions` does; the family's hook ``_cost_to_go()`` answers
        for a live episode.
        """
        self._require_reset()
        if self.won:
            return 0
        if self.lost:
            return UNREACHABLE
        return int(self._cost_to_go())

    def _oracle_actions(self) -> list[str]:
        """The family hook behind :meth:`oracle_actions`: called only after reset, on a live
        episode."""
        raise self._missing("_oracle_actions() -> list[str]")

    def _cost_to_go(self) -> int:
        """The family hook behind :meth:`cost_to_go`: called only after reset, neither won nor
        lost."""
        raise self._missing("_cost_to_go() -> int")

    # ------------------------------------------------------------------ the fault hook
    def _fault(self, kind: str, rng: np.random.Generator, action: Any) -> FaultOutcome:
        """The family hook: apply the family fault ``kind`` on a turn whose agent action is
        ``action`` and say what happened. Draw only from ``rng`` (the fault then replays exactly);
        run the agent's action, when the kind lets it run, through :meth:`_attempt`
        (arming and the generic kinds: :class:`~budget_envs.env_faults.FaultArming`)."""
        raise NotImplementedError(
            f"{type(self).__name__} lists the fault kind {kind!r} but implements no _fault()"
        )

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a task: ``options["task_id"]`` (index or id) picks it, otherwise the seed does."""
        self._require_open()
        super().reset(seed=seed)
        self._armed = None
        task_id = self._resolve_task(options)
        self._reset_rng_state = copy.deepcopy(self.np_random.bit_generator.state)
        self._start(task_id)
        return self._last_obs, self.current_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one turn, faulty if a fault is armed. Bad input is a turn, never an exception.

        The one place a turn happens: the plain path runs ``action`` through :meth:`_attempt`;
        an armed fault runs through the generic kinds or the family hook ``_fault``. Either way
        the bookkeeping (turn count, replay trace, ``terminated``, observation bounds, ``info``)
        is the same, and a faulty turn adds ``info["fault"]`` = ``{"kind", "action", "executed",
        "effect"}``.
        """
        self._require_reset()
        armed, self._armed = self._armed, None
        outcome: FaultOutcome | None = None
        if armed is not None and not self._done:
            rng_state = copy.deepcopy(armed.rng.bit_generator.state)
            outcome = self._apply_fault(armed.kind, armed.rng, action)
            self._trace.append(("fault", armed.kind, rng_state, action))
            obs, reward, invalid = outcome.observation, outcome.reward, outcome.invalid
        else:
            obs, reward, invalid = self._attempt(action)
            if not invalid:
                self._trace.append(("step", action))
        self.turn += 1
        was_done, self._done = self._done, self.won or self.lost
        self._last_obs = self._finish_obs(obs)
        info = self.current_info(invalid=invalid)
        if self._done and not was_done:
            info["stop_reason"] = "won" if self.won else "lost"
        if outcome is not None:
            info["fault"] = {
                "kind": armed.kind,
                "action": action if isinstance(action, str) else repr(action),
                "executed": outcome.executed or "",
                "effect": outcome.effect,
                "cell": list(self.fault_cells()[armed.kind]),
            }
        return self._last_obs, float(reward), self._done, False, info

    def _attempt(self, action: Any) -> tuple[str, float, bool]:
        """Check and execute ``action`` as an ordinary turn would: ``(obs, reward, invalid)``.

        No bookkeeping (the caller counts the turn); a rejected action leaves the state
        untouched and its feedback is the observation.
        """
        problem = self.check_action(action)
        if problem is None and self._done:
            problem = "The episode is over; no further action has any effect. Call reset()."
        if problem is None:
            try:
                obs, reward = self._execute(action)
            except ActionRejected as exc:
                problem = str(exc) or "That action is not valid here."
            else:
                return obs, float(reward), False
        return problem, 0.0, True

    def close(self) -> None:
        """Release what the env holds; later calls raise :class:`EnvClosed` (no reopening), a
        second ``close()`` does nothing. A family's ``close`` calls ``super().close()``."""
        self._closed = True
        super().close()

    def render(self) -> str | None:
        """``ansi``: the last observation."""
        if self.render_mode == "ansi":
            return self._last_obs
        return None

    # ------------------------------------------------------------------ helpers
    def check_action(self, action: Any) -> str | None:
        """Feedback text if ``action`` is malformed text, else None (the family parses the rest)."""
        if not isinstance(action, str):
            return f"Invalid action: expected text, got {type(action).__name__}. Send a string."
        if len(action) > self.max_action_length:
            return (
                f"Invalid action: {len(action)} characters is over the limit of "
                f"{self.max_action_length}. Send a shorter action."
            )
        if not action or action.isspace():
            return "Invalid action: the action is empty. Send a command."
        if _CONTROL.search(action):
            return "Invalid action: it contains control characters (such as NUL). Send plain text."
        if "\n" in action or "\r" in action:  # engines would run each line as a command
            return "Invalid action: it holds a line break. Send one action on one line."
        if not action.isascii():  # ASCII text has no lone surrogates
            try:
                action.encode("utf-8")
            except UnicodeEncodeError:
                return "Invalid action: it is not valid Unicode text (lone surrogates)."
        return None

    def current_info(self, invalid: bool = False) -> dict[str, Any]:
        """The ``info`` dict for the current state (see :mod:`budget_envs.info`)."""
        info = {
            "task_id": self._task_id,
            "goal": self._goal(),
            "won": bool(self.won),
            "lost": bool(self.lost),
            "admissible_actions": [] if self._done else list(self._admissible()),
            "invalid_action": invalid,
            "turn": self.turn,
        }
        extra = self._extra_info()
        info.update(extra)
        # Actions to send as they are, in every family: the admissible commands unless the
        # family builds its own (tool calls, concrete searches); none once the episode is over.
        if self._done:
            info["candidate_actions"] = []
        elif "candidate_actions" not in info:
            info["candidate_actions"] = list(info["admissible_actions"])
        info["state_hash"] = self.state_hash()
        if any(type(v) is Deferred for v in extra.values()):  # built when read
            return LazyInfo(info)
        return info

    def state_hash(self) -> str | None:
        """A stable hash of the semantic world state (see ``state_hash`` in :mod:`budget_envs.info`).

        The task id, won/lost and the family's ``_state_digest()`` (bytes or str) are hashed with
        BLAKE2b (16 bytes, hex); None while the family's digest is None (no state yet).
        """
        digest = self._state_digest()
        if digest is None:
            return None
        key = (self._task_id, bool(self.won), bool(self.lost))
        # A family that reuses its digest object while the state is unchanged (ToolUse) gets
        # its hash reused too.
        memo = self._hash_memo
        if memo is not None and memo[0] is digest and memo[1] == key:
            return memo[2]
        raw = digest.encode("utf-8", "surrogatepass") if isinstance(digest, str) else digest
        head = f"{self._task_id}\x1f{int(self.won)}{int(self.lost)}\x1f".encode()
        out = hashlib.blake2b(head + raw, digest_size=16).hexdigest()
        self._hash_memo = (digest, key, out)
        return out

    def _state_digest(self) -> bytes | str | None:
        """Canonical bytes (or text) of what the task's future depends on: a required hook
        (``info["state_hash"]`` is built from it); None only while the family has no state yet."""
        raise self._missing("_state_digest() -> str | bytes")

    @property
    def task_id(self) -> str | None:
        """The task being played, or None before the first reset."""
        return self._task_id

    @property
    def done(self) -> bool:
        """Whether the episode has ended (won or lost)."""
        return self._done

    @property
    def trace(self) -> tuple:
        """Every state-changing event since reset: ``("step", a)`` or ``("fault", kind, rng, a)``
        (``rng`` is the fault generator's state before the fault drew from it)."""
        return tuple(self._trace)

    def _finish_obs(self, obs: str) -> str:
        """Keep an observation inside the observation space: charset and length."""
        if not obs.isascii() or _CONTROL.search(obs):
            obs = _OUTSIDE_CHARSET.sub("?", obs)
        if len(obs) > self._obs_limit:
            note = f"\n[observation cut: {len(obs)} characters]"
            obs = obs[: self._obs_limit - len(note)] + note
        return obs

    def _resolve_task(self, options: dict[str, Any] | None) -> str:
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        unknown = sorted(map(str, set(options or ()) - {"task_id"}))
        if unknown:  # a typo (taskid) must not play a seeded task silently
            raise ValueError(f"unknown reset options {unknown}; the env takes task_id")
        wanted = None if options is None else options.get("task_id")
        ids = self.task_ids
        if wanted is None:
            return self._pick_task(self.np_random)
        if isinstance(wanted, (int, np.integer)) and not isinstance(wanted, bool):
            if not -len(ids) <= int(wanted) < len(ids):
                raise ValueError(
                    f"options['task_id'] index {int(wanted)} is out of range: "
                    f"this env has {len(ids)} tasks"
                )
            return ids[int(wanted)]
        if isinstance(wanted, str):
            if wanted not in self._task_index():
                raise ValueError(
                    f"unknown task id {wanted!r}; expected an index below {len(ids)} or one of "
                    f"env.unwrapped.task_ids (e.g. {list(ids[:3])!r})"
                )
            return wanted
        raise TypeError(
            f"options['task_id'] must be an int index or a str id, got {type(wanted).__name__}"
        )

    def task_for_reset(self, seed: int | None = None, options: dict | None = None) -> str:
        """The task ``reset(seed=seed, options=options)`` would start, drawing nothing from this
        env's generator (for a family's ``prepare_reset``: slow work done before the reset)."""
        if options is not None and options.get("task_id") is not None:
            return self._resolve_task(options)
        rng = seeding.np_random(seed)[0] if seed is not None else copy.deepcopy(self.np_random)
        return self._pick_task(rng)

    def _task_index(self) -> dict[str, int] | set[str]:
        cache = getattr(self, "_task_index_cache", None)
        if cache is None or len(cache) != len(self.task_ids):
            cache = {t: i for i, t in enumerate(self.task_ids)}
            self._task_index_cache = cache
        return cache

    def _start(self, task_id: str) -> None:
        self._task_id = task_id
        self._trace = []
        self._done = False
        self.turn = 0
        self.won = False
        self.lost = False
        self._last_obs = self._finish_obs(self._load(task_id))

    def _require_open(self) -> None:
        if self._closed:
            raise EnvClosed(f"this {type(self).__name__} was closed; make a new env")

    def _require_reset(self) -> None:
        self._require_open()
        if self._task_id is None:
            raise error.ResetNeeded("Call reset() before step() or the oracle and fault hooks.")

    def _missing(self, hook: str) -> NotImplementedError:
        """The error of a required family hook left out (``budget_envs.contract`` names it too)."""
        return NotImplementedError(
            f"{type(self).__name__} does not implement the required hook {hook}; see "
            "docs/extending.md#1-the-env-class"
        )
