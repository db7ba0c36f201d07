"""Pass@(K,T) surfaces, bootstrap intervals, single-step accuracy and recovery.

The unit of data is ``first_success``: an integer array of shape ``(tasks, samples)`` holding the
1-based turn at which each sampled episode first succeeded, 0 if it never did, and -1 for a missing
sample (an episode that errored). Pass@(K,T) per task is the unbiased estimate
``1 - C(n - c_T, K) / C(n, K)`` with ``c_T = #{samples with 1 <= first_success <= T}``; the
surface averages it over tasks.

The ratio of binomials is evaluated as the product ``prod_{i<K} (n - c - i) / (n - i)`` of factors
in [0, 1], computed once per ``(n, c, K)`` by a cumulative product: no huge integers, no
cancellation, and the cost does not depend on the number of tasks beyond one histogram.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from budget_envs.errors import DerivationError

__all__ = [
    "DerivationError",
    "bootstrap_pass_at_kt",
    "first_success_matrix",
    "miss_ratio_table",
    "pass_at_kt",
    "pass_at_kt_per_task",
    "CellRecoveryRow",
    "PrefixDiffRow",
    "PrefixRow",
    "damage_bin",
    "prefix_difference",
    "prefix_table",
    "recovery_by_cell",
    "recovery_table",
    "single_step_accuracy",
    "wilson_interval",
]


def _int_list(values: Iterable[int] | int, what: str) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(values))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{what} must be a non-empty int or 1-d list of ints, got {values!r}")
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"{what} must be integers, got {values!r}")
    return arr.astype(np.int64)


def miss_ratio_table(n: int, k_max: int) -> np.ndarray:
    """``R[c, K] = C(n - c, K) / C(n, K)`` for ``c`` in 0..n and ``K`` in 0..k_max.

    Row ``c`` is the cumulative product of ``(n - c - i) / (n - i)``; a factor that would go
    negative is clipped to 0 (fewer than K failures: every K-subset holds a success).
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n!r}")
    if not 0 <= k_max <= n:
        raise ValueError(f"k_max must be in [0, n={n}], got {k_max!r}")
    c = np.arange(n + 1, dtype=np.float64)[:, None]
    i = np.arange(k_max, dtype=np.float64)[None, :]
    factors = np.clip((n - c - i) / (n - i), 0.0, 1.0)
    table = np.ones((n + 1, k_max + 1), dtype=np.float64)
    np.cumprod(factors, axis=1, out=table[:, 1:])
    return table


def _check(first_success: Any, ks: Any, ts: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    fs = np.asarray(first_success)
    if fs.ndim != 2 or fs.shape[0] == 0 or fs.shape[1] == 0:
        raise ValueError(
            f"first_success must be a non-empty 2-d array (tasks, samples), got shape {fs.shape}"
        )
    if not np.issubdtype(fs.dtype, np.integer):
        raise TypeError(f"first_success must hold integers (turns), got dtype {fs.dtype}")
    if np.any(fs < -1):
        raise ValueError("first_success entries must be >= -1 (turn, 0 = never, -1 = missing)")
    ks_arr = _int_list(ks, "ks")
    ts_arr = _int_list(ts, "ts")
    if np.any(ts_arr < 0):
        raise ValueError(f"ts must be >= 0, got {ts!r}")
    return fs.astype(np.int64, copy=False), ks_arr, ts_arr


def _success_counts(fs: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """``counts[task, j]`` = samples of ``task`` that succeeded within ``ts[j]`` turns."""
    tasks = fs.shape[0]
    top = int(ts.max()) + 1
    # Bin every success turn (0 = never or missing, >= top = later than any asked T).
    clipped = np.where(fs > 0, np.minimum(fs, top), 0)
    hist = np.bincount(
        (np.arange(tasks, dtype=np.int64)[:, None] * (top + 1) + clipped).ravel(),
        minlength=tasks * (top + 1),
    ).reshape(tasks, top + 1)
    hist[:, 0] = 0
    cum = np.cumsum(hist, axis=1)
    return cum[:, ts]


def _group_by_n(fs: np.ndarray) -> dict[int, np.ndarray]:
    n_per_task = (fs >= 0).sum(axis=1)
    return {int(n): np.flatnonzero(n_per_task == n) for n in np.unique(n_per_task)}


def pass_at_kt(first_success: Any, ks: Any, ts: Any) -> np.ndarray:
    """The Pass@(K,T) surface, shape ``(len(ks), len(ts))``, averaged over tasks.

    Args:
        first_success: int array (tasks, samples): 1-based first success turn, 0 = never,
            -1 = missing sample (a task's n is its number of non-missing samples).
        ks: sample counts K (each 1 <= K <= n of every task).
        ts: turn budgets T.

    Raises:
        ValueError: for K < 1 or K > n, or a malformed array.

    Example:
        >>> pass_at_kt([[1, 0], [3, 2]], ks=[1, 2], ts=[1, 3]).round(3).tolist()
        [[0.25, 0.75], [0.5, 1.0]]
    """
    fs, ks_arr, ts_arr = _check(first_success, ks, ts)
    total = np.zeros((ks_arr.size, ts_arr.size), dtype=np.float64)
    # The mean of the one per-task estimator, a block of tasks at a time (bounded memory).
    for start in range(0, fs.shape[0], _BLOCK):
        total += pass_at_kt_per_task(fs[start : start + _BLOCK], ks_arr, ts_arr).sum(axis=0)
    return total / fs.shape[0]


#: Tasks per block when :func:`pass_at_kt` averages the per-task estimates.
_BLOCK = 128


def _check_k(ks: np.ndarray, groups: Mapping[int, np.ndarray]) -> None:
    n_min = min(groups)
    if np.any(ks < 1):
        raise ValueError(f"every K must be at least 1, got ks={ks.tolist()}")
    if np.any(ks > n_min):
        raise ValueError(
            f"K={int(ks.max())} exceeds the number of samples n={n_min} of some task; "
            "Pass@(K,T) needs K <= n"
        )


def pass_at_kt_per_task(first_success: Any, ks: Any, ts: Any) -> np.ndarray:
    """Per-task Pass@(K,T), shape ``(tasks, len(ks), len(ts))`` (for bootstrap and paired tests):
    the one estimator; :func:`pass_at_kt` is its mean over tasks.

    A task with n samples of which c succeed within T has Pass@(K,T) = 1 - C(n-c, K) / C(n, K).
    """
    fs, ks_arr, ts_arr = _check(first_success, ks, ts)
    groups = _group_by_n(fs)
    _check_k(ks_arr, groups)
    out = np.empty((fs.shape[0], ks_arr.size, ts_arr.size), dtype=np.float64)
    for n, rows in groups.items():
        counts = _success_counts(fs[rows], ts_arr)
        table = miss_ratio_table(n, int(ks_arr.max()))[:, ks_arr]  # (n+1, len(ks))
        out[rows] = 1.0 - np.transpose(table[counts], (0, 2, 1))
    return out


def bootstrap_pass_at_kt(
    first_success: Any,
    ks: Any,
    ts: Any,
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    per_task: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Point estimate and percentile bootstrap interval over tasks: ``(mean, low, high)``.

    Tasks are resampled with replacement ``n_boot`` times from a generator seeded by ``seed``,
    so the interval is reproducible. Each array has shape ``(len(ks), len(ts))``.

    Example:
        >>> mean, low, high = bootstrap_pass_at_kt([[1, 0], [3, 2], [0, 0]], ks=[1], ts=[3])
        >>> bool(low[0, 0] <= mean[0, 0] <= high[0, 0]), round(float(mean[0, 0]), 3)
        (True, 0.5)
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    values = pass_at_kt_per_task(first_success, ks, ts) if per_task is None else per_task
    tasks = values.shape[0]
    flat = values.reshape(tasks, -1)
    mean = flat.mean(axis=0)
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(tasks, np.full(tasks, 1.0 / tasks), size=int(n_boot)).astype(float)
    boots = weights @ flat / tasks  # (n_boot, K*T)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boots, [alpha, 1.0 - alpha], axis=0)
    shape = values.shape[1:]
    return mean.reshape(shape), low.reshape(shape), high.reshape(shape)


# ---------------------------------------------------------------------- from records
def _get(record: Any, name: str, default: Any = None) -> Any:
    if isinstance(record, Mapping):
        return record.get(name, default)
    return getattr(record, name, default)


def first_success_matrix(
    records: Sequence[Any], budget: int, *, samples: int | None = None
) -> tuple[list[str], np.ndarray]:
    """Build ``first_success`` for budget ``budget`` from episode records of one agent and env.

    Budget-hidden records (``visibility == "hidden"``) run at any ``T' >= budget`` give the answer
    for ``budget`` too: success within ``budget`` turns is ``1 <= first_success_turn <= budget``
    (the agent could not see the limit, so its first ``budget`` turns are the same as in a run
    capped at ``budget``). Budget-visible records count only when run at exactly ``budget``;
    deriving a smaller T from them raises :class:`DerivationError`.

    Returns ``(task_ids, matrix)``; missing samples (errors) are -1.
    """
    by_task: dict[str, dict[int, int]] = {}
    visible_larger = False
    top_sample = -1
    for rec in records:
        top_sample = max(top_sample, int(_get(rec, "sample")))
        if _get(rec, "error"):
            continue
        limit = int(_get(rec, "budget"))
        hidden = _get(rec, "visibility", "hidden") == "hidden"
        if limit == budget or (hidden and limit > budget):
            fs = _get(rec, "first_success_turn")
            value = int(fs) if fs is not None and int(fs) <= budget else 0
            slot = by_task.setdefault(str(_get(rec, "task_id")), {})
            sample = int(_get(rec, "sample"))
            # A hidden run at exactly this budget and a larger one must agree; keep the first.
            slot.setdefault(sample, value)
        elif not hidden and limit > budget:
            visible_larger = True
    if not by_task:
        if visible_larger:
            raise DerivationError(
                f"no run at T={budget}: the records are budget-visible runs at larger T, and a "
                "smaller T cannot be derived from them (the agent saw its budget); run T="
                f"{budget} separately"
            )
        raise DerivationError(f"no record covers T={budget}")
    task_ids = sorted(by_task)
    n = samples if samples is not None else top_sample + 1
    matrix = np.full((len(task_ids), n), -1, dtype=np.int64)
    for i, task in enumerate(task_ids):
        for sample, value in by_task[task].items():
            if sample < n:
                matrix[i, sample] = value
    return task_ids, matrix


def single_step_accuracy(records: Sequence[Any]) -> dict[str, float | int | None]:
    """Share of turns whose action was an oracle action.

    Episode records contribute their per-turn ``oracle_agreement`` (on-policy); probe records
    (``record == "probe"``) contribute ``correct``: from oracle-prefix states, or (a probe with
    a ``fault``) from states off the oracle's path. Returns ``{"on_policy", "on_policy_turns",
    "prefix", "prefix_states", "prefix_progress", "offpath", "offpath_states"}``.
    """
    on = [
        a
        for r in records
        if _get(r, "record", "episode") == "episode"
        for a in (_get(r, "oracle_agreement") or [])
        if a is not None
    ]
    # Probes past the end of a short task have no state to act in (correct is None).
    answered = [
        r
        for r in records
        if _get(r, "record") == "probe" and not _get(r, "error") and _get(r, "correct") is not None
    ]
    probes = [r for r in answered if _get(r, "fault") is None]
    offpath = [bool(_get(r, "correct")) for r in answered if _get(r, "fault") is not None]
    progress = [bool(_get(r, "progress")) for r in probes if _get(r, "progress") is not None]
    return {
        "on_policy": float(np.mean(on)) if on else None,
        "on_policy_turns": len(on),
        "prefix": float(np.mean([bool(_get(r, "correct")) for r in probes])) if probes else None,
        "prefix_states": len(probes),
        "prefix_progress": float(np.mean(progress)) if progress else None,
        "offpath": float(np.mean(offpath)) if offpath else None,
        "offpath_states": len(offpath),
    }


#: A cost-to-go at or above this means the task can no longer be solved.
UNSOLVABLE = 10_000


def _fault_damage(faults: Iterable[Mapping[str, Any]]) -> tuple[list[int], int]:
    """The damage of each fault whose oracle costs are known (cost-to-go after minus before),
    and how many faults left the task unsolvable (counted apart, not as damage)."""
    damage, unrecoverable = [], 0
    for f in faults:
        before, after = f.get("cost_before"), f.get("cost_after")
        if before is None or after is None:
            continue
        if after >= UNSOLVABLE:
            unrecoverable += 1
        elif before < UNSOLVABLE:
            damage.append(after - before)
    return damage, unrecoverable


@dataclass(frozen=True)
class RecoveryRow:
    """Success after a fault at ``fault_turn`` against no fault, at the same budget."""

    fault_turn: int
    budget: int
    episodes: int
    success: float
    baseline_success: float | None
    damage: float | None
    extra_turns: float | None
    fired: float = 1.0
    unrecoverable: int = 0


def recovery_table(
    records: Sequence[Any], budgets: Sequence[int] | None = None
) -> list[RecoveryRow]:
    """Recovery per fault turn and budget.

    Faulted episodes are the records whose ``fault_turn`` is set; the baseline is the records
    without faults run at the same budget. ``budgets`` lists the T to report (default: the budget
    each fault was run at); a smaller T is derived from budget-hidden runs only (success within
    T = first success turn <= T), like Pass@(K,T). ``damage`` is the mean oracle cost-to-go added
    by the fault (faults that made the task unsolvable, cost-to-go >= ``UNSOLVABLE``, are counted
    in ``unrecoverable`` instead); ``fired`` is the share of episodes in which the fault happened
    (an episode can end before turn ``t``); ``extra_turns`` is, over tasks solved within T both
    ways, the mean first-success turn with the fault minus without it.
    """
    eps = [r for r in records if _get(r, "record", "episode") == "episode" and not _get(r, "error")]
    base: dict[int, list[Any]] = {}
    faulted: dict[tuple[int, int], list[Any]] = {}
    for r in eps:
        t = _get(r, "fault_turn")
        if t is None:
            base.setdefault(int(_get(r, "budget")), []).append(r)
        else:
            faulted.setdefault((int(t), int(_get(r, "budget"))), []).append(r)

    def within(r: Any, limit: int) -> int | None:
        fs = _get(r, "first_success_turn")
        return int(fs) if fs is not None and int(fs) <= limit else None

    rows = []
    for (t, run_budget), group in sorted(faulted.items()):
        ref = base.get(run_budget, [])
        hidden = all(_get(r, "visibility", "hidden") == "hidden" for r in group + ref)
        fired_faults = [f for r in group for f in _get(r, "faults") or [] if f.get("turn") == t]
        fired = len(fired_faults)
        damage, unrecoverable = _fault_damage(fired_faults)
        wanted = (
            [run_budget]
            if budgets is None
            else [
                int(b) for b in budgets if int(b) == run_budget or (hidden and int(b) < run_budget)
            ]
        )
        for budget in sorted(set(wanted)):
            ref_turns: dict[str, list[int]] = {}
            for r in ref:
                fs = within(r, budget)
                if fs is not None:
                    ref_turns.setdefault(str(_get(r, "task_id")), []).append(fs)
            got_turns: dict[str, list[int]] = {}
            for r in group:
                fs = within(r, budget)
                if fs is not None:
                    got_turns.setdefault(str(_get(r, "task_id")), []).append(fs)
            extra = [
                np.mean(turns) - np.mean(ref_turns[task])
                for task, turns in got_turns.items()
                if task in ref_turns
            ]
            rows.append(
                RecoveryRow(
                    fault_turn=t,
                    budget=budget,
                    episodes=len(group),
                    success=float(np.mean([within(r, budget) is not None for r in group])),
                    baseline_success=float(np.mean([within(r, budget) is not None for r in ref]))
                    if ref
                    else None,
                    damage=float(np.mean(damage)) if damage else None,
                    extra_turns=float(np.mean(extra)) if extra else None,
                    fired=fired / len(group),
                    unrecoverable=unrecoverable,
                )
            )
    return rows


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95% by default); (0, 1) when ``n`` is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


@dataclass
class CellRecoveryRow:
    """Success after a fault of one cell (visibility, persistence), against no fault."""

    env_id: str
    agent: str
    cell: str
    kinds: str
    episodes: int
    success: float
    low: float
    high: float
    baseline_success: float | None
    damage: float | None
    unrecoverable: int


def recovery_by_cell(records: Sequence[Any]) -> list[CellRecoveryRow]:
    """Recovery broken down by the cell of the fault (``faults[i]["cell"]`` of each record).

    An episode counts for a cell when its first fault lies in that cell; success is
    ``won``, with its Wilson 95% interval; the baseline is the same env and agent without faults
    at the same budgets. ``damage`` is the mean cost-to-go the fault added (faults that made the
    task unsolvable are counted in ``unrecoverable`` instead).
    """
    eps = [r for r in records if _get(r, "record", "episode") == "episode" and not _get(r, "error")]
    base: dict[tuple[str, str], list[Any]] = {}
    cells: dict[tuple[str, str, str], list[tuple[Any, dict]]] = {}
    for r in eps:
        key = (str(_get(r, "env_id")), str(_get(r, "agent")))
        faults = _get(r, "faults") or []
        if _get(r, "fault_turn") is None and not faults:
            base.setdefault(key, []).append(r)
        elif faults and faults[0].get("cell"):
            cell = "/".join(faults[0]["cell"])
            cells.setdefault(key + (cell,), []).append((r, faults[0]))
    rows = []
    for (env_id, agent, cell), group in sorted(cells.items()):
        wins = sum(bool(_get(r, "won")) for r, _ in group)
        low, high = wilson_interval(wins, len(group))
        budgets = {int(_get(r, "budget")) for r, _ in group}
        ref = [r for r in base.get((env_id, agent), []) if int(_get(r, "budget")) in budgets]
        damage, unrecoverable = _fault_damage([f for _, f in group])
        rows.append(
            CellRecoveryRow(
                env_id=env_id,
                agent=agent,
                cell=cell,
                kinds=",".join(sorted({f["kind"] for _, f in group})),
                episodes=len(group),
                success=wins / len(group),
                low=low,
                high=high,
                baseline_success=float(np.mean([bool(_get(r, "won")) for r in ref]))
                if ref
                else None,
                damage=float(np.mean(damage)) if damage else None,
                unrecoverable=unrecoverable,
            )
        )
    return rows


@dataclass
class PrefixRow:
    """Success of an agent after a replayed failed prefix of ``prefix_turns`` turns."""

    env_id: str
    agent: str
    source: str
    prefix_turns: int
    damage: str
    probes: int
    success: float
    low: float
    high: float


def damage_bin(damage: int | None) -> str:
    """The damage of a prefix in oracle turns, binned: 0, 1-2, 3-5, 6+, lost."""
    if damage is None:
        return "?"
    if damage >= UNSOLVABLE:
        return "lost"
    if damage <= 0:
        return "0"
    if damage <= 2:
        return "1-2"
    if damage <= 5:
        return "3-5"
    return "6+"


def prefix_table(records: Sequence[Any], by: str = "both") -> list[PrefixRow]:
    """Success after a failed prefix, by prefix length t and by damage bin (``by``: ``turns``,
    ``damage`` or ``both``), with Wilson 95% intervals. Only probes whose replay reached the
    original episode's state count (``reached``)."""
    if by not in ("turns", "damage", "both"):
        raise ValueError(f"by must be 'turns', 'damage' or 'both', got {by!r}")
    groups: dict[tuple, list[Any]] = {}
    for r in records:
        if _get(r, "record") != "prefix" or _get(r, "error") or not _get(r, "reached"):
            continue
        t = int(_get(r, "prefix_turns")) if by != "damage" else -1
        d = damage_bin(_get(r, "damage")) if by != "turns" else "all"
        key = (str(_get(r, "env_id")), str(_get(r, "agent")), str(_get(r, "source")), t, d)
        groups.setdefault(key, []).append(r)
    rows = []
    for (env_id, agent, source, t, d), group in sorted(groups.items()):
        wins = sum(bool(_get(r, "won")) for r in group)
        low, high = wilson_interval(wins, len(group))
        rows.append(
            PrefixRow(env_id, agent, source, t, d, len(group), wins / len(group), low, high)
        )
    return rows


@dataclass
class PrefixDiffRow:
    """B's success minus A's after the same failed prefixes (same source episode and t), with a
    paired bootstrap interval over tasks. ``prefix_turns`` is -1 and ``damage`` ``"all"`` on
    the row over every probe pair; a by-t row has damage ``"all"``, a by-damage row t -1."""

    env_id: str
    source: str
    prefix_turns: int
    damage: str
    pairs: int
    tasks: int
    success_a: float
    success_b: float
    diff: float
    low: float
    high: float


def _prefix_probes(records: Sequence[Any], agent: str, visibility: str | None) -> dict:
    out = {}
    for r in records:
        if _get(r, "record") != "prefix" or _get(r, "agent") != agent:
            continue
        if visibility is not None and _get(r, "visibility", "hidden") != visibility:
            continue
        if _get(r, "error") or not _get(r, "reached"):
            continue
        key = (
            str(_get(r, "env_id")),
            str(_get(r, "source_key")),
            int(_get(r, "prefix_turns")),
            str(_get(r, "prefix_digest")),
        )
        out[key] = r
    return out


def prefix_difference(
    records_a: Sequence[Any],
    records_b: Sequence[Any],
    *,
    agent_a: str,
    agent_b: str,
    visibility_a: str | None = None,
    visibility_b: str | None = None,
    env_id: str | None = None,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[PrefixDiffRow]:
    """B minus A on the prefix probes both agents played on the same failed prefixes.

    A pair is a probe of ``agent_a`` in ``records_a`` and one of ``agent_b`` in ``records_b``
    of the same source episode (``source_key``), the same t and the same replayed actions
    (``prefix_digest``), both reached and error-free. Per task, the difference is B's success
    rate minus A's over the task's pairs; rows average it over tasks, with the percentile
    bootstrap of :func:`bootstrap_pass_at_kt` over tasks (the paired draws the Pass@(K,T)
    comparison uses), by t and by the prefix's damage bin (:func:`damage_bin`), per env and
    source agent.
    """
    pa = _prefix_probes(records_a, agent_a, visibility_a)
    pb = _prefix_probes(records_b, agent_b, visibility_b)
    groups: dict[tuple[str, str], list[tuple[Any, Any]]] = {}
    for key in sorted(set(pa) & set(pb)):
        if env_id is not None and key[0] != env_id:
            continue
        a, b = pa[key], pb[key]
        groups.setdefault((key[0], str(_get(a, "source"))), []).append((a, b))
    rows = []
    for (env, source), pairs in sorted(groups.items()):
        columns: list[tuple[int, str, list[tuple[Any, Any]]]] = [(-1, "all", pairs)]
        for t in sorted({int(_get(a, "prefix_turns")) for a, _ in pairs}):
            columns.append((t, "all", [p for p in pairs if int(_get(p[0], "prefix_turns")) == t]))
        bins = ["0", "1-2", "3-5", "6+", "lost", "?"]
        for d in bins:
            mine = [p for p in pairs if damage_bin(_get(p[0], "damage")) == d]
            if mine:
                columns.append((-1, d, mine))
        for t, d, mine in columns:
            by_task: dict[str, list[tuple[float, float]]] = {}
            for a, b in mine:
                by_task.setdefault(str(_get(a, "task_id")), []).append(
                    (float(bool(_get(a, "won"))), float(bool(_get(b, "won"))))
                )
            per_a = np.array([np.mean([x for x, _ in v]) for _, v in sorted(by_task.items())])
            per_b = np.array([np.mean([y for _, y in v]) for _, v in sorted(by_task.items())])
            mean, low, high = bootstrap_pass_at_kt(
                None,
                [1],
                [1],
                n_boot=n_boot,
                confidence=confidence,
                seed=seed,
                per_task=(per_b - per_a).reshape(-1, 1, 1),
            )
            rows.append(
                PrefixDiffRow(
                    env_id=env,
                    source=source,
                    prefix_turns=t,
                    damage=d,
                    pairs=len(mine),
                    tasks=len(by_task),
                    success_a=float(per_a.mean()),
                    success_b=float(per_b.mean()),
                    diff=float(mean[0, 0]),
                    low=float(low[0, 0]),
                    high=float(high[0, 0]),
                )
            )
    return rows
