"""The evaluation runner: tasks x samples x budgets x fault settings, locally or on Ray.

A run is a directory holding ``config.json`` (the plan) and ``records.jsonl`` (one JSON line per
finished episode or single-step probe, appended and flushed as each one ends, by the driver
only). ``resume=True`` skips every episode already recorded without an error, so a killed run
loses nothing it finished.

Budget-hidden agents run once per sample at ``T_max``: the first-success turn gives every smaller
T (see :func:`budget_envs.eval.metrics.first_success_matrix`). Budget-visible agents run once per
T. Episode seeds depend on (run seed, task, sample) only, so the episodes of different budgets
and fault settings are paired.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from budget_envs.core import TextAgentEnv
from budget_envs.eval.agents import AgentError, make_agent

__all__ = [
    "EpisodeJob",
    "EpisodeRecord",
    "EvalPlan",
    "ProbeJob",
    "ProbeRecord",
    "RECORDS_FILE",
    "CONFIG_FILE",
    "episode_seed",
    "load_records",
    "plan_jobs",
    "run_episode",
    "run_jobs",
    "run_plan",
    "run_probe",
    "transcript",
]

logger = logging.getLogger(__name__)

RECORDS_FILE = "records.jsonl"
CONFIG_FILE = "config.json"
#: Keys a real agent would not see; removed from the info handed to agents.
_HIDDEN_KEYS = ("fault", "faults", "episode_summary")


# ---------------------------------------------------------------------- records and jobs
@dataclass
class EpisodeRecord:
    """One evaluated episode (one JSON line)."""

    env_id: str
    task_id: str
    task_index: int
    sample: int
    seed: int
    budget: int
    visibility: str
    agent: str
    fault_turn: int | None
    fault_kinds: list[str] | None
    turns: int
    won: bool
    first_success_turn: int | None
    faults: list[dict[str, Any]]
    oracle_agreement: list[bool | None] | None
    wall_time: float
    tokens: dict[str, int] | None = None
    error: str | None = None
    key: str = ""
    record: str = "episode"


@dataclass
class ProbeRecord:
    """One single-step probe: the agent's action from the state after ``prefix_turns`` oracle turns."""

    env_id: str
    task_id: str
    task_index: int
    seed: int
    agent: str
    prefix_turns: int
    action: str | None
    correct: bool | None
    progress: bool | None
    cost_before: int | None
    wall_time: float
    tokens: dict[str, int] | None = None
    error: str | None = None
    key: str = ""
    record: str = "probe"


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


def _make(env_id: str, **kwargs: Any) -> gym.Env:
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
    env = _make(env_id, budget=None, **env_kwargs)
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


# ---------------------------------------------------------------------- one episode
def _canon(action: str) -> str:
    text = action.strip()
    if text[:1] in "{[":
        try:
            return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
        except ValueError:
            pass
    return " ".join(text.lower().split())


def agrees(action: str, best: Sequence[str]) -> bool:
    """Whether ``action`` is one of the oracle actions ``best`` (case, spacing and JSON key order
    do not matter)."""
    if action in best:
        return True
    if not isinstance(action, str):
        return False
    canon = _canon(action)
    return any(canon == _canon(b) for b in best)


class _Worker:
    """Per-process state: built agents and envs, reused across jobs."""

    def __init__(self, agents: Mapping[str, Any]) -> None:
        self.agent_specs = dict(agents)
        self.agents: dict[str, Any] = {}
        self.envs: dict[tuple, gym.Env] = {}

    def agent(self, name: str) -> Any:
        if name not in self.agents:
            spec = self.agent_specs[name]
            agent = make_agent(spec) if isinstance(spec, str) else spec
            self.agents[name] = agent
        return self.agents[name]

    def env(self, job: EpisodeJob | None, env_id: str, env_kwargs: Mapping[str, Any]) -> gym.Env:
        if job is None:
            key: tuple = (env_id, "bare")
        else:
            key = (env_id, job.visibility, job.fault_turn, job.fault_kinds)
        if key not in self.envs:
            if job is None:
                self.envs[key] = _make(env_id, budget=None, **env_kwargs)
            else:
                faults = None
                if job.fault_turn is not None:
                    faults = {
                        "kinds": list(job.fault_kinds or ("slip",)),
                        "at_turn": job.fault_turn,
                        "max_faults": 1,
                    }
                self.envs[key] = _make(
                    env_id,
                    visibility=job.visibility,
                    budget=job.budget,
                    faults=faults,
                    **env_kwargs,
                )
        return self.envs[key]

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
        self.envs.clear()


def _agent_info(info: Mapping[str, Any], hidden: bool) -> dict[str, Any]:
    drop = _HIDDEN_KEYS + (("budget",) if hidden else ())
    return {k: v for k, v in info.items() if k not in drop}


def _usage(agent: Any) -> dict[str, int] | None:
    fn = getattr(agent, "usage", None)
    return dict(fn()) if callable(fn) else None


def run_episode(job: EpisodeJob, agent: Any, env: gym.Env) -> EpisodeRecord:
    """Play one episode of ``job`` with ``agent`` on ``env`` (an env made for the job's settings).

    Agent failures (:class:`AgentError`, or any exception from the agent) end the episode as an
    error record; they are never counted as a failed task.
    """
    start = time.perf_counter()
    unwrapped = env.unwrapped
    hidden = job.visibility == "hidden"
    memo: list[Any] = [-1, None]

    def oracle() -> list[str]:
        # One oracle call per turn, shared by the agent and the agreement bookkeeping.
        if memo[0] != turns:
            memo[0], memo[1] = turns, unwrapped.oracle_actions()
        return memo[1]

    turns = 0
    bind = getattr(agent, "bind_oracle", None)
    if bind is not None:
        bind(oracle)
    track = job.track_oracle and _has_oracle(unwrapped)
    agreement: list[bool | None] | None = [] if track else None
    info: dict[str, Any] = {}
    error = None
    obs, info = env.reset(seed=job.seed, options={"task_id": job.task_index, "budget": job.budget})
    try:
        agent.reset(
            env_id=job.env_id, observation=obs, info=_agent_info(info, hidden), seed=job.seed
        )
        while True:
            action = agent.act(obs, _agent_info(info, hidden))
            if agreement is not None:
                best = oracle()
                agreement.append(agrees(action, best) if best else None)
            obs, _, terminated, truncated, info = env.step(action)
            turns += 1
            if terminated or truncated:
                break
    except AgentError as exc:
        error = f"AgentError: {exc}"
    except Exception as exc:  # a user's agent may raise anything; record it, keep the run going
        logger.exception("agent %s failed on %s", job.agent, job.key)
        error = f"{type(exc).__name__}: {exc}"
    summary = info.get("episode_summary") or {}
    first = summary.get("first_success_turn") if error is None else None
    return EpisodeRecord(
        env_id=job.env_id,
        task_id=job.task_id,
        task_index=job.task_index,
        sample=job.sample,
        seed=job.seed,
        budget=job.budget,
        visibility=job.visibility,
        agent=job.agent,
        fault_turn=job.fault_turn,
        fault_kinds=None if job.fault_kinds is None else list(job.fault_kinds),
        turns=turns,
        won=bool(first is not None),
        first_success_turn=first,
        faults=[dict(f) for f in info.get("faults", ())],
        oracle_agreement=agreement,
        wall_time=time.perf_counter() - start,
        tokens=_usage(agent),
        error=error,
        key=job.key,
    )


def _has_oracle(unwrapped: Any) -> bool:
    method = getattr(type(unwrapped), "oracle_actions", None)
    return method is not None and method is not TextAgentEnv.oracle_actions


def run_probe(job: ProbeJob, agent: Any, env: gym.Env) -> ProbeRecord:
    """Single-step probe: the oracle plays ``prefix_turns`` turns, then the agent picks one action.

    The agent is told the prefix as if it had played it (``teacher_force``). Its action is scored
    against ``oracle_actions()`` (``correct``) and by whether it lowers the oracle cost-to-go
    (``progress``; executed on a snapshot, then the state is restored).
    """
    start = time.perf_counter()
    unwrapped = env.unwrapped
    obs, info = env.reset(seed=job.seed, options={"task_id": job.task_index})
    bind = getattr(agent, "bind_oracle", None)
    if bind is not None:
        bind(unwrapped.oracle_actions)
    error = action = correct = progress = cost = None
    try:
        # The env replays the task's seed; the agent gets a seed of its own per probe state, so
        # the probes of one task are independent draws rather than one draw repeated.
        agent_seed = int(
            np.random.SeedSequence([job.seed, job.prefix_turns, 0x9B0BE]).generate_state(1)[0]
        )
        agent.reset(
            env_id=job.env_id, observation=obs, info=_agent_info(info, True), seed=agent_seed
        )
        done = False
        for _ in range(job.prefix_turns):
            best = unwrapped.oracle_actions()
            if not best:
                done = True
                break
            obs, _, terminated, _, info = env.step(best[0])
            force = getattr(agent, "teacher_force", None)
            if force is not None:
                force(best[0], obs, _agent_info(info, True))
            if terminated:
                done = True
                break
        if not done:
            best = unwrapped.oracle_actions()
            cost = int(unwrapped.cost_to_go())
            snap = unwrapped.snapshot()
            action = agent.act(obs, _agent_info(info, True))
            correct = agrees(action, best)
            env.step(action)
            progress = bool(unwrapped.won or unwrapped.cost_to_go() < cost)
            unwrapped.restore(snap)
    except AgentError as exc:
        error = f"AgentError: {exc}"
    except Exception as exc:
        logger.exception("agent %s failed on %s", job.agent, job.key)
        error = f"{type(exc).__name__}: {exc}"
    return ProbeRecord(
        env_id=job.env_id,
        task_id=job.task_id,
        task_index=job.task_index,
        seed=job.seed,
        agent=job.agent,
        prefix_turns=job.prefix_turns,
        action=action,
        correct=correct,
        progress=progress,
        cost_before=cost,
        wall_time=time.perf_counter() - start,
        tokens=_usage(agent),
        error=error,
        key=job.key,
    )


def _run_one(
    worker: _Worker, job: EpisodeJob | ProbeJob, env_kwargs: Mapping[str, Any]
) -> EpisodeRecord | ProbeRecord:
    agent = worker.agent(job.agent)
    if isinstance(job, ProbeJob):
        return run_probe(job, agent, worker.env(None, job.env_id, env_kwargs))
    return run_episode(job, agent, worker.env(job, job.env_id, env_kwargs))


def run_jobs(
    jobs: Iterable[EpisodeJob | ProbeJob],
    agents: Mapping[str, Any],
    env_kwargs: Mapping[str, Any] | None = None,
) -> Iterator[EpisodeRecord | ProbeRecord]:
    """Run ``jobs`` one after another in this process, yielding each record as it ends."""
    worker = _Worker(agents)
    try:
        for job in jobs:
            yield _run_one(worker, job, env_kwargs or {})
    finally:
        worker.close()


# ---------------------------------------------------------------------- parallel back ends
_PROCESS_WORKER: _Worker | None = None


def _register(entries: Sequence[Any]) -> None:
    from budget_envs.registry import register_env

    for entry in entries:
        register_env(entry)


def _pool_init(agents: Mapping[str, Any], entries: Sequence[Any]) -> None:
    global _PROCESS_WORKER
    _register(entries)
    _PROCESS_WORKER = _Worker(agents)


def _pool_chunk(chunk: list[Any], env_kwargs: Mapping[str, Any]) -> list[Any]:
    if _PROCESS_WORKER is None:
        raise RuntimeError("worker process was not initialized (_pool_init)")
    return [_run_one(_PROCESS_WORKER, job, env_kwargs) for job in chunk]


_RAY_WORKERS: dict[str, _Worker] = {}


def _ray_chunk(
    token: str,
    agents: Mapping[str, Any],
    entries: Sequence[Any],
    chunk: list[Any],
    env_kwargs: Mapping[str, Any],
) -> list[Any]:
    # Ray reuses worker processes: keep one _Worker per run (token), so envs are built once.
    worker = _RAY_WORKERS.get(token)
    if worker is None:
        for old in _RAY_WORKERS.values():
            old.close()
        _RAY_WORKERS.clear()
        _register(entries)
        worker = _RAY_WORKERS[token] = _Worker(agents)
    return [_run_one(worker, job, env_kwargs) for job in chunk]


def _chunks(jobs: list[Any], size: int) -> list[list[Any]]:
    return [jobs[i : i + size] for i in range(0, len(jobs), size)]


def _entries(env_ids: Iterable[str]) -> list[Any]:
    from budget_envs.registry import entry_for

    return [entry_for(e) for e in sorted(set(env_ids))]


def _iter_process(
    jobs: list[Any],
    agents: Mapping[str, Any],
    env_kwargs: Mapping[str, Any],
    workers: int,
    chunk: int,
) -> Iterator[Any]:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    # fork: workers inherit ids registered at run time (tests, users' own envs) and the agents.
    ctx = multiprocessing.get_context(
        "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    )
    with ProcessPoolExecutor(
        workers,
        mp_context=ctx,
        initializer=_pool_init,
        initargs=(agents, _entries(j.env_id for j in jobs)),
    ) as pool:
        pending = {pool.submit(_pool_chunk, c, env_kwargs) for c in _chunks(jobs, chunk)}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield from fut.result()


def _iter_ray(
    jobs: list[Any],
    agents: Mapping[str, Any],
    env_kwargs: Mapping[str, Any],
    address: str,
    chunk: int,
) -> Iterator[Any]:
    from budget_envs._util import import_optional

    ray = import_optional("ray", extra="ray", what="the Ray back end")
    if not ray.is_initialized():
        if address == "local":
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    remote = ray.remote(_ray_chunk)
    agents_ref = ray.put(dict(agents))
    entries_ref = ray.put(_entries(j.env_id for j in jobs))
    token = f"{os.getpid()}-{time.time_ns()}"
    pending = [
        remote.remote(token, agents_ref, entries_ref, c, dict(env_kwargs))
        for c in _chunks(jobs, chunk)
    ]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            yield from ray.get(ref)


# ---------------------------------------------------------------------- a whole run
def load_records(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every record of a run (a torn last line from a killed run is skipped)."""
    path = Path(run_dir) / RECORDS_FILE if Path(run_dir).is_dir() else Path(run_dir)
    out = []
    if not path.exists():
        return out
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                logger.warning("skipping a torn line in %s", path)
    return out


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line that a killed run left without its newline (appends must start clean)."""
    with open(path, "rb+") as fh:
        data = fh.read()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            logger.warning("dropping a torn last record of %d bytes in %s", len(data) - cut, path)
            fh.truncate(cut)


@dataclass
class RunResult:
    """What :func:`run_plan` did."""

    run_dir: Path
    total: int
    skipped: int
    ran: int
    errors: int


def run_plan(
    plan: EvalPlan,
    run_dir: str | os.PathLike[str],
    *,
    workers: int = 1,
    ray: str | None = None,
    resume: bool = False,
    chunk: int | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_record: Callable[[Any], None] | None = None,
) -> RunResult:
    """Run ``plan`` into ``run_dir`` (``config.json`` + ``records.jsonl``).

    Args:
        workers: local processes (1 = in this process).
        ray: ``"auto"``, ``"local"`` or a cluster address to fan out as Ray tasks (an already
            initialized Ray is used as is).
        resume: skip episodes already recorded without error; otherwise an existing non-empty
            record file is an error (no silent overwrite, no silent mixing).
        on_start(total, skipped) and on_record(record): progress hooks (the CLI's progress bar).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    run_dir = Path(run_dir)
    records_path = run_dir / RECORDS_FILE
    done_keys: set[str] = set()
    if records_path.exists() and records_path.stat().st_size > 0:
        if not resume:
            raise FileExistsError(
                f"{records_path} already holds records; pass resume=True (--resume) to continue "
                "that run, or choose a new run directory"
            )
        _drop_torn_tail(records_path)
        done_keys = {r["key"] for r in load_records(run_dir) if not r.get("error")}
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / CONFIG_FILE
    if not config_path.exists() or not resume:
        config_path.write_text(
            json.dumps(plan.to_json(), indent=2, default=str) + "\n", encoding="utf-8"
        )
    all_jobs = plan_jobs(plan)
    jobs = [j for j in all_jobs if j.key not in done_keys]
    skipped = len(all_jobs) - len(jobs)
    if on_start is not None:
        on_start(len(all_jobs), skipped)
    if chunk is None:
        parallel = workers if ray is None else 8
        chunk = max(1, min(16, math.ceil(len(jobs) / max(1, parallel * 4))))
    if ray is not None:
        stream = _iter_ray(jobs, plan.agents, plan.env_kwargs, ray, chunk)
    elif workers > 1:
        stream = _iter_process(jobs, plan.agents, plan.env_kwargs, workers, chunk)
    else:
        stream = run_jobs(jobs, plan.agents, plan.env_kwargs)
    ran = errors = 0
    with open(records_path, "a", encoding="utf-8") as fh:
        for record in stream:
            fh.write(json.dumps(asdict(record)) + "\n")
            fh.flush()
            ran += 1
            errors += bool(record.error)
            if on_record is not None:
                on_record(record)
    return RunResult(run_dir=run_dir, total=len(all_jobs), skipped=skipped, ran=ran, errors=errors)


def transcript(
    env_id: str,
    *,
    seed: int = 0,
    budget: int | None = None,
    max_turns: int | None = None,
    agent: Any = None,
    visibility: str = "remaining",
    task: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One episode turn by turn (default: the oracle, budget shown), for demos and docs.

    Entry 0 is the reset (``goal``, ``observation``, ``budget``); then one entry per turn with the
    action, the observation, ``budget`` accounting and, on the last one, ``episode_summary``.
    """
    from budget_envs.eval.agents import OracleAgent

    limit = budget if budget is not None else default_t_max(env_id)
    env = _make(env_id, budget=limit, visibility=visibility, **dict(env_kwargs or {}))
    agent = agent if agent is not None else OracleAgent(seed=seed)
    bind = getattr(agent, "bind_oracle", None)
    if bind is not None:
        bind(env.unwrapped.oracle_actions)
    try:
        obs, info = env.reset(seed=seed, options={"task_id": task})
        turns = [
            {"turn": 0, "goal": info.get("goal"), "observation": obs, "budget": info.get("budget")}
        ]
        agent.reset(
            env_id=env_id,
            observation=obs,
            info=_agent_info(info, visibility == "hidden"),
            seed=seed,
        )
        for t in range(1, (max_turns or limit) + 1):
            action = agent.act(obs, _agent_info(info, visibility == "hidden"))
            obs, reward, terminated, truncated, info = env.step(action)
            entry = {
                "turn": t,
                "action": action,
                "observation": obs,
                "reward": float(reward),
                "budget": info.get("budget"),
                "fault": info.get("fault"),
            }
            if "episode_summary" in info:
                entry["episode_summary"] = info["episode_summary"]
            turns.append(entry)
            if terminated or truncated:
                break
        return turns
    finally:
        env.close()
