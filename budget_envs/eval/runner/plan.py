"""The plan of a run: what to evaluate, expanded into episode and probe jobs in a fixed order.

Episode seeds depend on (run seed, task, sample) only, so the episodes of different budgets and
fault settings are paired.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "EpisodeJob",
    "EvalPlan",
    "PrefixJob",
    "ProbeJob",
    "TaskSelection",
    "default_t_max",
    "episode_seed",
    "make_env",
    "plan_jobs",
    "select_tasks",
]


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to run."""

    env_id: str
    agent: str
    task_index: int
    task_id: str
    sample: int
    seed: int
    budget: int
    visibility: str = "hidden"
    fault_turn: int | None = None
    fault_kinds: tuple[str, ...] | None = None
    track_oracle: bool = True
    #: Keep the episode's observations for ``transcripts.jsonl`` (not part of the key).
    transcript: bool = False

    @property
    def key(self) -> str:
        fault = (
            "none"
            if self.fault_turn is None
            else f"{self.fault_turn}:{'+'.join(self.fault_kinds or ())}"
        )
        return (
            f"episode|{self.env_id}|{self.agent}|{self.task_id}|{self.sample}|T{self.budget}|"
            f"{self.visibility}|fault={fault}"
        )


@dataclass(frozen=True)
class ProbeJob:
    """A single-step probe of one task: the state after ``prefix_turns`` oracle turns, or with
    ``fault`` (``"slip"``) the state after one more oracle action that the fault replaced: a
    state off the oracle's path."""

    env_id: str
    agent: str
    task_index: int
    task_id: str
    seed: int
    prefix_turns: int
    fault: str | None = None

    @property
    def key(self) -> str:
        base = f"probe|{self.env_id}|{self.agent}|{self.task_id}|t{self.prefix_turns}"
        return base if self.fault is None else f"{base}|{self.fault}"


@dataclass(frozen=True)
class PrefixJob:
    """A prefix probe: ``agent`` plays on after ``prefix_turns`` turns of a failed episode.

    ``source`` holds the failed episode record's fields a replay needs (its key, seed, task,
    budget, visibility, fault and per-turn actions, digests, costs and state hashes). The env
    settings are the source episode's, so a worker builds (and shares) the same env for it.
    """

    env_id: str
    agent: str
    source: Mapping[str, Any]
    prefix_turns: int

    @property
    def task_index(self) -> int:
        return int(self.source["task_index"])

    @property
    def task_id(self) -> str:
        return str(self.source["task_id"])

    @property
    def seed(self) -> int:
        return int(self.source["seed"])

    @property
    def budget(self) -> int:
        return int(self.source["budget"])

    @property
    def visibility(self) -> str:
        return str(self.source.get("visibility", "hidden"))

    @property
    def fault_turn(self) -> int | None:
        turn = self.source.get("fault_turn")
        return None if turn is None else int(turn)

    @property
    def fault_kinds(self) -> tuple[str, ...] | None:
        kinds = self.source.get("fault_kinds")
        return None if kinds is None else tuple(kinds)

    @property
    def key(self) -> str:
        return f"prefix:{self.source.get('key', '')}:t{self.prefix_turns}:{self.agent}"


@dataclass
class EvalPlan:
    """What to evaluate.

    Attributes:
        env_ids: registered ids.
        agents: name -> agent spec (``"random"``, ``"oracle:epsilon=0.3"``, ``"chat:..."``) or an
            :class:`~budget_envs.eval.agents.Agent` instance (picklable for workers and Ray).
        tasks: a count of tasks per env, spread over the family's levels when it has them
            (see :func:`select_tasks`), or a list of task ids or indices.
        samples: episodes per task (n of Pass@(K,T)).
        budgets: turn budgets; None = each env's default ``T_max``. Budget-hidden runs use only
            the largest; budget-visible runs use each.
        visibility: the BudgetWrapper visibility (``"hidden"`` allows the single-run derivation).
        fault_turns: also run every sample with one fault at each of these turns (recovery).
        fault_kinds: the kinds drawn for those faults.
        probe_states: single-step probes from the first this-many oracle-prefix states (0 = off).
        offpath_probe_states: single-step probes from states off the oracle's path: after each of
            the first this-many oracle prefixes, the oracle's next action replaced by a slip
            fault (0 = off).
        track_oracle: record per-turn oracle agreement (single-step accuracy on-policy).
        seed: the run seed (episode seeds derive from it, the task and the sample).
        env_kwargs: extra constructor kwargs of the env.
        prefix_turns: after the episodes, replay the first t turns of failed episodes for
            each t here and let each agent play the remaining T - t turns (empty = off; see
            :mod:`budget_envs.eval.runner.prefix`).
        prefix_from: whose failed episodes are replayed: None = every agent its own; the name
            of one of ``agents`` = that agent's, for every agent (the same prefixes for all,
            which ``compare`` pairs).
        prefix_episodes: at most this many failed episodes per env and source agent, dealt
            round-robin over the tasks (None = all).
        transcripts: also write every episode as a chat row into ``transcripts.jsonl``
            (:mod:`budget_envs.eval.runner.transcripts`).
    """

    env_ids: list[str]
    agents: dict[str, Any]
    tasks: int | list[Any] = 5
    samples: int = 4
    budgets: list[int] | None = None
    visibility: str = "hidden"
    fault_turns: list[int] = field(default_factory=list)
    fault_kinds: tuple[str, ...] = ("slip", "drop")
    probe_states: int = 0
    offpath_probe_states: int = 0
    track_oracle: bool = True
    seed: int = 0
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    prefix_turns: list[int] = field(default_factory=list)
    prefix_from: str | None = None
    prefix_episodes: int | None = 20
    transcripts: bool = False

    def __post_init__(self) -> None:
        if not self.env_ids:
            raise ValueError("env_ids must name at least one registered env id")
        if not isinstance(self.agents, Mapping) or not self.agents:
            raise ValueError(
                f"agents must be a non-empty mapping name -> agent, got {self.agents!r}"
            )
        for what, value, low in (
            ("samples", self.samples, 1),
            ("probe_states", self.probe_states, 0),
            ("offpath_probe_states", self.offpath_probe_states, 0),
            ("seed", self.seed, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{what} must be an int >= {low}, got {value!r}")
        if isinstance(self.tasks, int) and (isinstance(self.tasks, bool) or self.tasks < 1):
            raise ValueError(
                f"tasks must be a positive int or a list of task ids, got {self.tasks!r}"
            )
        if self.budgets is not None:
            if not self.budgets or any(
                isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in self.budgets
            ):
                raise ValueError(
                    f"budgets must be a non-empty list of ints >= 1, got {self.budgets!r}"
                )
        for t in self.fault_turns:
            if isinstance(t, bool) or not isinstance(t, int) or t < 1:
                raise ValueError(f"fault_turns must be ints >= 1, got {self.fault_turns!r}")
        if not isinstance(self.visibility, str):
            raise TypeError(f"visibility must be a string, got {self.visibility!r}")
        if not isinstance(self.transcripts, bool):
            raise TypeError(f"transcripts must be True or False, got {self.transcripts!r}")
        for t in self.prefix_turns:
            if isinstance(t, bool) or not isinstance(t, int) or t < 1:
                raise ValueError(f"prefix_turns must be ints >= 1, got {self.prefix_turns!r}")
        if self.prefix_from is not None and self.prefix_from not in self.agents:
            raise ValueError(
                f"prefix_from must name one of the agents {list(self.agents)} (or be None for "
                f"each agent's own episodes), got {self.prefix_from!r}"
            )
        if self.prefix_episodes is not None and (
            isinstance(self.prefix_episodes, bool)
            or not isinstance(self.prefix_episodes, int)
            or self.prefix_episodes < 1
        ):
            raise ValueError(
                f"prefix_episodes must be an int >= 1 or None, got {self.prefix_episodes!r}"
            )

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON (agents by spec or by class name)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["agents"] = {
            name: a if isinstance(a, str) else f"<{type(a).__name__}>"
            for name, a in self.agents.items()
        }
        data["fault_kinds"] = list(self.fault_kinds)
        return data


def episode_seed(run_seed: int, task_index: int, sample: int) -> int:
    """The reset seed of an episode: the same in every process, for every budget and fault."""
    return int(np.random.SeedSequence([run_seed, task_index, sample]).generate_state(1)[0])


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    with warnings.catch_warnings():
        # The passive checker warns about Text spaces it cannot sample-check; not the run's news.
        warnings.simplefilter("ignore")
        return gym.make(env_id, **kwargs)


def default_t_max(env_id: str) -> int:
    """The largest T of the env's default budget spec."""
    from budget_envs.registry import entry_for
    from budget_envs.wrappers import parse_budget

    return int(parse_budget(entry_for(env_id).default_budget).t_max)


@dataclass(frozen=True)
class TaskSelection:
    """The tasks a plan evaluates on one env, and how they were chosen (kept in ``config.json``).

    Attributes:
        env_id: the env.
        tasks: ``(index, task_id)`` pairs in task-list order.
        stratified_by: ``"level"`` when a count of tasks was spread over the family's levels
            (its ``task_level`` hook); None when the tasks were listed or the family has no
            levels (then the first tasks of the list are taken).
        per_level: chosen tasks per level, in the family's level order (None when not
            stratified).
    """

    env_id: str
    tasks: tuple[tuple[int, str], ...]
    stratified_by: str | None = None
    per_level: tuple[tuple[Any, int], ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "task_ids": [t for _, t in self.tasks],
            "task_indices": [i for i, _ in self.tasks],
            "stratified_by": self.stratified_by,
            "per_level": None
            if self.per_level is None
            else [{"level": level, "tasks": n} for level, n in self.per_level],
        }


def _stratified(ids: Sequence[str], count: int, level_of: Any) -> TaskSelection | None:
    """``count`` tasks dealt round-robin over the levels (first tasks of each level first)."""
    groups: dict[Any, list[int]] = {}
    for i, task_id in enumerate(ids):
        groups.setdefault(level_of(task_id), []).append(i)
    if len(groups) < 2:
        return None
    chosen: dict[Any, list[int]] = {level: [] for level in groups}
    left = min(count, len(ids))
    depth = 0
    while left:
        for level, members in groups.items():
            if left and depth < len(members):
                chosen[level].append(members[depth])
                left -= 1
        depth += 1
    picked = sorted(i for members in chosen.values() for i in members)
    return TaskSelection(
        env_id="",
        tasks=tuple((i, ids[i]) for i in picked),
        stratified_by="level",
        per_level=tuple((level, len(members)) for level, members in chosen.items()),
    )


def select_tasks(
    env_id: str, tasks: int | list[Any], env_kwargs: Mapping[str, Any] | None = None
) -> TaskSelection:
    """The tasks of ``env_id`` a plan's ``tasks`` names.

    A count is spread over the family's levels when the env has a ``task_level(task_id)`` hook
    (so ``tasks=50`` on a five-level family plays 10 tasks of each level, not the 50 easiest);
    otherwise it takes the first tasks. A list names task ids or indices.
    """
    env = make_env(env_id, budget=None, **dict(env_kwargs or {}))
    try:
        unwrapped = env.unwrapped
        ids = list(unwrapped.task_ids)
        level_of = getattr(unwrapped, "task_level", None)
        if isinstance(tasks, int) and callable(level_of):
            spread = _stratified(ids, tasks, level_of)
            if spread is not None:
                return dataclasses.replace(spread, env_id=env_id)
    finally:
        env.close()
    if isinstance(tasks, int):
        return TaskSelection(env_id, tuple(enumerate(ids[:tasks])))
    out = []
    index = {t: i for i, t in enumerate(ids)}
    for t in tasks:
        if isinstance(t, int) and not isinstance(t, bool):
            if not 0 <= t < len(ids):
                raise ValueError(f"task index {t} is out of range for {env_id} ({len(ids)} tasks)")
            out.append((t, ids[t]))
        elif t in index:
            out.append((index[t], t))
        else:
            raise ValueError(f"unknown task {t!r} for {env_id}; e.g. {ids[:3]!r}")
    return TaskSelection(env_id, tuple(out))


def plan_jobs(
    plan: EvalPlan, selections: Mapping[str, TaskSelection] | None = None
) -> list[EpisodeJob | ProbeJob]:
    """Expand a plan into jobs, in a fixed order (``selections``: :func:`select_tasks` of each
    env, when already made)."""
    jobs: list[EpisodeJob | ProbeJob] = []
    hidden = plan.visibility == "hidden"
    for env_id in plan.env_ids:
        budgets = sorted(set(plan.budgets)) if plan.budgets else [default_t_max(env_id)]
        t_max = max(budgets)
        run_budgets = [t_max] if hidden else budgets
        selection = (selections or {}).get(env_id) or select_tasks(
            env_id, plan.tasks, plan.env_kwargs
        )
        tasks = selection.tasks
        for agent in plan.agents:
            for task_index, task_id in tasks:
                settings: list[int | None] = [None] + list(plan.fault_turns)
                for fault_turn in settings:
                    for budget in run_budgets if fault_turn is None else [t_max]:
                        for sample in range(plan.samples):
                            jobs.append(
                                EpisodeJob(
                                    env_id=env_id,
                                    agent=agent,
                                    task_index=task_index,
                                    task_id=task_id,
                                    sample=sample,
                                    seed=episode_seed(plan.seed, task_index, sample),
                                    budget=budget,
                                    visibility=plan.visibility,
                                    fault_turn=fault_turn,
                                    fault_kinds=None
                                    if fault_turn is None
                                    else tuple(plan.fault_kinds),
                                    track_oracle=plan.track_oracle,
                                    transcript=plan.transcripts,
                                )
                            )
                probes = [(t, None) for t in range(plan.probe_states)]
                probes += [(t, "slip") for t in range(plan.offpath_probe_states)]
                for t, fault in probes:
                    jobs.append(
                        ProbeJob(
                            env_id=env_id,
                            agent=agent,
                            task_index=task_index,
                            task_id=task_id,
                            seed=episode_seed(plan.seed, task_index, 0),
                            prefix_turns=t,
                            fault=fault,
                        )
                    )
    return jobs
