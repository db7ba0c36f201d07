"""The plan of a run: what to evaluate, expanded into episode and probe jobs in a fixed order.

Episode seeds depend on (run seed, task, sample) only, so the episodes of different budgets and
fault settings are paired.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "EpisodeJob",
    "EvalPlan",
    "ProbeJob",
    "default_t_max",
    "episode_seed",
    "make_env",
    "plan_jobs",
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
    """Single-step probes along the oracle path of one task."""

    env_id: str
    agent: str
    task_index: int
    task_id: str
    seed: int
    prefix_turns: int

    @property
    def key(self) -> str:
        return f"probe|{self.env_id}|{self.agent}|{self.task_id}|t{self.prefix_turns}"


@dataclass
class EvalPlan:
    """What to evaluate.

    Attributes:
        env_ids: registered ids.
        agents: name -> agent spec (``"random"``, ``"oracle:epsilon=0.3"``, ``"chat:..."``) or an
            :class:`~budget_envs.eval.agents.Agent` instance (picklable for workers and Ray).
        tasks: the first ``tasks`` task ids of each env, or a list of ids or indices.
        samples: episodes per task (n of Pass@(K,T)).
        budgets: turn budgets; None = each env's default ``T_max``. Budget-hidden runs use only
            the largest; budget-visible runs use each.
        visibility: the BudgetWrapper visibility (``"hidden"`` allows the single-run derivation).
        fault_turns: also run every sample with one fault at each of these turns (recovery).
        fault_kinds: the kinds drawn for those faults.
        probe_states: single-step probes from the first this-many oracle-prefix states (0 = off).
        track_oracle: record per-turn oracle agreement (single-step accuracy on-policy).
        seed: the run seed (episode seeds derive from it, the task and the sample).
        env_kwargs: extra constructor kwargs of the env.
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
    track_oracle: bool = True
    seed: int = 0
    env_kwargs: dict[str, Any] = field(default_factory=dict)

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


def _task_list(
    env_id: str, tasks: int | list[Any], env_kwargs: Mapping[str, Any]
) -> list[tuple[int, str]]:
    env = make_env(env_id, budget=None, **env_kwargs)
    try:
        ids = list(env.unwrapped.task_ids)
    finally:
        env.close()
    if isinstance(tasks, int):
        return list(enumerate(ids[:tasks]))
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
    return out


def plan_jobs(plan: EvalPlan) -> list[EpisodeJob | ProbeJob]:
    """Expand a plan into jobs, in a fixed order."""
    jobs: list[EpisodeJob | ProbeJob] = []
    hidden = plan.visibility == "hidden"
    for env_id in plan.env_ids:
        budgets = sorted(set(plan.budgets)) if plan.budgets else [default_t_max(env_id)]
        t_max = max(budgets)
        run_budgets = [t_max] if hidden else budgets
        tasks = _task_list(env_id, plan.tasks, plan.env_kwargs)
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
                                )
                            )
                for t in range(plan.probe_states):
                    jobs.append(
                        ProbeJob(
                            env_id=env_id,
                            agent=agent,
                            task_index=task_index,
                            task_id=task_id,
                            seed=episode_seed(plan.seed, task_index, 0),
                            prefix_turns=t,
                        )
                    )
    return jobs
