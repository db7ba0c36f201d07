"""ErrorInjection: seeded faults on chosen turns, to measure recovery rather than single steps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from budget_envs.core import CELLS, GENERIC_KINDS
from budget_envs.errors import UnknownFaultKind
from budget_envs.info import NO_TURN

__all__ = ["DEFAULT_RATE", "ErrorInjection", "GENERIC_KINDS"]

_SEED_TAG = 0xFA017
_BLOCK = 64

#: The per-turn fault probability when faults are asked for by kind alone (no ``at_turn``, no
#: ``rate``): ``gymnasium.make(id, faults="slip")`` fires on about one turn in ten.
DEFAULT_RATE = 0.1


def _check_cells(cells: Any) -> frozenset[tuple[str, str]] | None:
    """``cells=`` as a set of (visibility, persistence) pairs; a bare word selects a whole row or
    column (``"silent"``: both silent cells; ``"permanent"``: both permanent cells)."""
    if cells is None:
        return None
    if isinstance(cells, str) or (
        isinstance(cells, tuple)
        and len(cells) == 2
        and all(isinstance(c, str) for c in cells)
        and tuple(cells) in CELLS
    ):
        cells = [cells]
    try:
        items = list(cells)
    except TypeError:
        raise TypeError(
            f"cells must be a list of (visibility, persistence) pairs, got {cells!r}"
        ) from None
    out: set[tuple[str, str]] = set()
    for item in items:
        if isinstance(item, str):
            hit = [c for c in CELLS if item in c]
        else:
            try:
                hit = [tuple(item)] if tuple(item) in CELLS else []
            except TypeError:
                hit = []
        if not hit:
            raise ValueError(
                f"unknown fault cell {item!r} in cells={cells!r}; expected pairs out of "
                f"{list(CELLS)} or one of the words explicit, silent, transient, permanent"
            )
        out.update(hit)
    if not out:
        raise ValueError(f"cells must name at least one cell, got {cells!r}")
    return frozenset(out)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _kinds_and_weights(
    kinds: Any, available: tuple[str, ...], env_name: str
) -> tuple[list[str], list[Any]]:
    """The kind names of ``kinds`` (a name, names or a ``{name: weight}`` mapping) and their
    weights (1 each unless given), checked: at least one, each of ``available``, distinct."""
    if isinstance(kinds, str):
        names, weights = [kinds], [1.0]
    elif isinstance(kinds, Mapping):
        names, weights = list(kinds.keys()), [kinds[k] for k in kinds]
    else:
        try:
            names = list(kinds)
        except TypeError:
            raise TypeError(
                f"kinds must be a kind name, a list of names or a {{name: weight}} mapping, "
                f"got {kinds!r}"
            ) from None
        weights = [1.0] * len(names)
    if not names:
        raise ValueError(f"kinds must name at least one fault kind out of {list(available)}")
    for name in names:
        if name not in available:
            raise UnknownFaultKind(
                f"unknown fault kind {name!r} for {env_name}; expected one of {list(available)}"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"fault kinds must be distinct, got {names!r}")
    return names, weights


def _check_weights(weights: list[Any], kinds: Any) -> np.ndarray:
    """``weights`` as an array of numbers >= 0, not all zero (``kinds`` quoted when not)."""
    try:
        weights_arr = np.asarray(weights, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"fault kind weights must be numbers, got {kinds!r}") from None
    if not np.all(np.isfinite(weights_arr)) or np.any(weights_arr < 0) or weights_arr.sum() <= 0:
        raise ValueError(f"fault kind weights must be >= 0 and not all zero, got {kinds!r}")
    return weights_arr


def _check_turns(at_turn: Any) -> frozenset[int]:
    """``at_turn`` (None, one turn or several) as a set of 1-based turns."""
    if at_turn is None:
        turns: frozenset[int] = frozenset()
    elif _is_int(at_turn):
        turns = frozenset([int(at_turn)])
    else:
        try:
            turns = frozenset(int(t) if _is_int(t) else t for t in at_turn)
        except TypeError:
            raise TypeError(
                f"at_turn must be an int, a list of ints or None, got {at_turn!r}"
            ) from None
    for t in turns:
        if not _is_int(t) or t < 1:
            raise ValueError(f"at_turn values must be ints >= 1 (1-based turns), got {at_turn!r}")
    return turns


class ErrorInjection(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Inject seeded faults into an episode and record the damage each one did.

    Generic kinds:

    * ``slip``: a different valid action is executed instead of the agent's;
    * ``drop``: the agent's action is not executed; the env's no-effect feedback is shown;
    * ``garble``: the agent's action runs but its observation is corrupted (state unchanged).

    Plus the family's own kinds (``fault_kinds()`` of the env, e.g. ``perturb``, ``http_error``,
    ``tool_error``); docs/faults.md gives every kind's meaning in every family.

    Which: ``kinds`` (names, or a ``{name: weight}`` mapping; default the generic kinds) and
    ``cells`` (``(visibility, persistence)`` pairs out of :data:`budget_envs.core.CELLS`, or the
    words ``explicit``, ``silent``, ``transient``, ``permanent`` for a whole row or column; see
    ``env.unwrapped.fault_cells()``). Both given: the kinds of ``kinds`` that lie in ``cells``;
    only ``cells``: every kind of the env in those cells.

    How: on a faulty turn the wrapper *arms* the fault on the env (its ``arm_fault``, reached with
    ``get_wrapper_attr``) and then calls ``self.env.step(action)`` as on any turn. The env's core
    applies the fault, computes reward and ``terminated`` the normal way and reports what the
    fault did in ``info["fault"]``; so every wrapper placed between this one and the env sees
    every turn as an ordinary ``step`` call returning an ordinary 5-tuple. The wrapper reads
    ``env.unwrapped`` only for the oracle's ``cost_to_go`` before and after the fault.

    When: ``at_turn`` (one turn or several, 1-based) fires for sure; ``rate`` fires on any turn
    with that probability; ``max_faults`` caps the faults per episode. With neither ``at_turn``
    nor ``rate`` given, ``rate`` is :data:`DEFAULT_RATE` (0.1), so faults asked for by kind
    alone (``faults="slip"``) do fire; ``rate=0`` given explicitly with no ``at_turn`` fires
    none (a sweep's zero point). The kind is drawn with the
    weights of ``kinds``. Every draw comes from the wrapper's generator, seeded from ``seed`` and
    from ``reset(seed=...)``, so the same seeds give the same faults.

    A faulty turn is still a turn (the budget counts it). ``info["fault"]`` on that turn holds the
    kind, the turn, the agent's action, the action executed (``""`` when nothing ran), the effect
    (see :data:`budget_envs.core.FAULT_EFFECTS`) and the oracle cost-to-go before and after (-1
    when the env has no oracle): the damage in turns. A fault due on a turn of a finished episode
    does not happen (nothing is recorded).
    ``info["faults"]`` lists the episode's faults so far, on every reset and step.

    Place it inside the :class:`BudgetWrapper` (``gymnasium.make(id, faults=...)`` does).

    Example:
        >>> from budget_envs.envs.tooluse import ToolUseEnv
        >>> from budget_envs.wrappers import ErrorInjection
        >>> env = ErrorInjection(ToolUseEnv(level=1), kinds="drop", at_turn=1, seed=0)
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_actions()[0])
        >>> fault = info["fault"]
        >>> fault["kind"], fault["turn"], fault["executed"]
        ('drop', 1, '')
        >>> fault["cost_after"] == fault["cost_before"]  # nothing ran, nothing was lost
        True
    """

    def __init__(
        self,
        env: gym.Env,
        kinds: str | Iterable[str] | Mapping[str, float] | None = None,
        cells: Iterable[tuple[str, str] | str] | None = None,
        at_turn: int | Iterable[int] | None = None,
        rate: float | None = None,
        max_faults: int | None = None,
        seed: int | None = None,
    ) -> None:
        """Wrap ``env``; see the class docstring for the meaning of each argument."""
        if not env.has_wrapper_attr("arm_fault"):
            raise TypeError(
                "ErrorInjection needs a budget_envs TextAgentEnv underneath (an env with "
                f"arm_fault()), got {env!r}"
            )
        family_kinds = tuple(env.get_wrapper_attr("fault_kinds")())
        available = GENERIC_KINDS + family_kinds
        kind_cells = dict(env.get_wrapper_attr("fault_cells")())
        wanted_cells = _check_cells(cells)
        given_kinds = kinds
        if kinds is None:  # all kinds of the chosen cells, or the generic kinds
            kinds = available if wanted_cells is not None else GENERIC_KINDS
        env_name = type(env.unwrapped).__name__
        names, weights = _kinds_and_weights(kinds, available, env_name)
        if wanted_cells is not None:
            keep = [i for i, n in enumerate(names) if kind_cells[n] in wanted_cells]
            if not keep:
                raise ValueError(
                    f"no fault kind of {names!r} lies in the cells {cells!r} on "
                    f"{env_name} (its cells: {kind_cells!r})"
                )
            names = [names[i] for i in keep]
            weights = [weights[i] for i in keep]
        weights_arr = _check_weights(weights, kinds)
        turns = _check_turns(at_turn)
        given_rate = rate
        if rate is None:
            rate = DEFAULT_RATE if at_turn is None else 0.0
        if isinstance(rate, bool) or not isinstance(rate, (int, float, np.floating, np.integer)):
            raise TypeError(f"rate must be a probability, got {rate!r}")
        if not 0.0 <= float(rate) <= 1.0:
            raise ValueError(f"rate must be in [0, 1], got {rate!r}")
        if max_faults is not None and (not _is_int(max_faults) or max_faults < 0):
            raise ValueError(f"max_faults must be an int >= 0 or None, got {max_faults!r}")
        if seed is not None and not _is_int(seed):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        gym.utils.RecordConstructorArgs.__init__(
            self,
            kinds=given_kinds,
            cells=cells,
            at_turn=at_turn,
            rate=given_rate,
            max_faults=max_faults,
            seed=seed,
        )
        gym.Wrapper.__init__(self, env)
        self.kinds = tuple(names)
        self.cells = {n: kind_cells[n] for n in names}
        self.kind_probs = weights_arr / weights_arr.sum()
        self.at_turns = turns
        self.rate = float(rate)
        self.max_faults = None if max_faults is None else int(max_faults)
        self.seed = None if seed is None else int(seed)
        self._reseed(None)
        self._turn = 0
        self._faults: tuple[dict[str, Any], ...] = ()

    # ------------------------------------------------------------------ seeding
    def _reseed(self, reset_seed: int | None) -> None:
        entropy = []
        if self.seed is not None:
            entropy.append(self.seed)
        if reset_seed is not None:
            entropy.append(int(reset_seed))
        if not entropy and hasattr(self, "fault_rng"):
            return
        seq = np.random.SeedSequence(entropy + [_SEED_TAG] if entropy else None)
        schedule_seq, fault_seq = seq.spawn(2)
        # Two streams: the per-turn coin flips never shift the draws a fault makes, and back.
        self.schedule_rng = np.random.default_rng(schedule_seq)
        self.fault_rng = np.random.default_rng(fault_seq)
        self._coins: list[float] = []
        self._coin_index = 0

    def _refill(self) -> float:
        # Coins come in blocks (a list: indexing it is far cheaper than a numpy scalar).
        self._coins = self.schedule_rng.random(_BLOCK).tolist()
        self._coin_index = 1
        return self._coins[0]

    # ------------------------------------------------------------------ API
    @property
    def faults(self) -> tuple[dict[str, Any], ...]:
        """Faults injected in the current episode."""
        return self._faults

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Reset the env; ``seed`` also reseeds the fault streams (combined with ``seed=``)."""
        if seed is not None:
            self._reseed(seed)
        obs, info = self.env.reset(seed=seed, options=options)
        self._turn = 0
        self._faults = ()
        info["faults"] = ()
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Step the env; when a fault is due, arm it first (the env's step applies it)."""
        turn = self._turn = self._turn + 1
        due = turn in self.at_turns
        if self.rate:
            i = self._coin_index
            if i < _BLOCK and self._coins:
                coin = self._coins[i]
                self._coin_index = i + 1
            else:
                coin = self._refill()
            if coin < self.rate:
                due = True
        kind = None
        if due and (self.max_faults is None or len(self._faults) < self.max_faults):
            rng = self.fault_rng
            kind = self.kinds[int(rng.choice(len(self.kinds), p=self.kind_probs))]
            cost_before = self._cost()
            self.env.get_wrapper_attr("arm_fault")(kind, rng)
        obs, reward, terminated, truncated, info = self.env.step(action)
        if kind is not None:
            applied = info.get("fault")
            if applied is None or applied.get("kind") != kind:
                # The episode was over (or a wrapper in between ended the turn): no fault.
                self.env.get_wrapper_attr("arm_fault")(None)
            else:
                record = {
                    "kind": kind,
                    "turn": turn,
                    "action": applied["action"],
                    "executed": applied["executed"],
                    "effect": applied["effect"],
                    "cell": list(self.cells[kind]),
                    "cost_before": cost_before,
                    "cost_after": self._cost(),
                }
                self._faults = self._faults + (record,)
                info["fault"] = dict(record)
        # Fresh copies once there are faults: infos of different steps must not share objects.
        info["faults"] = tuple([dict(f) for f in self._faults]) if self._faults else ()
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------------ damage
    def _cost(self) -> int:
        """The oracle's cost-to-go, or ``NO_TURN`` (-1) without an oracle (never None: infos of
        every episode keep one type, so vector envs can batch them)."""
        oracle = getattr(self.env.unwrapped, "cost_to_go", None)
        if oracle is None:
            return NO_TURN
        try:
            return int(oracle())
        except NotImplementedError:
            return NO_TURN
