"""The evaluation runner: tasks x samples x budgets x fault settings, locally or on Ray.

A run is a directory holding ``config.json`` (the plan) and ``records.jsonl`` (one JSON line per
finished episode, single-step probe or prefix probe, appended and flushed as each one ends, by
the driver only). ``resume=True`` skips every job already recorded without an error, so a
killed run loses nothing it finished.

Budget-hidden agents run once per sample at ``T_max``: the first-success turn gives every smaller
T (see :func:`budget_envs.eval.metrics.first_success_matrix`). Budget-visible agents run once per
T. Episode seeds depend on (run seed, task, sample) only, so the episodes of different budgets
and fault settings are paired.

The runner is split by concern: :mod:`.plan` (plans and jobs), :mod:`.episode` and :mod:`.probe`
(the drivers), :mod:`.prefix` (replays of failed prefixes, run after a plan's episodes),
:mod:`.worker` (per-process state), :mod:`.inprocess` (the in-process back end),
:mod:`.async_driver` (async agents' episodes, concurrently), :mod:`.local` (worker processes),
:mod:`.ray_backend` (episodes on Ray env actors), :mod:`.records` (JSONL records),
:mod:`.shown` and :mod:`.transcripts` (episodes as chat rows, ``transcripts.jsonl``) and
:mod:`.run` (a whole run). Every public name is importable from here.
"""

from __future__ import annotations

from budget_envs.eval.runner.episode import agrees, run_episode, transcript
from budget_envs.eval.runner.inprocess import run_jobs
from budget_envs.eval.runner.plan import (
    EpisodeJob,
    EvalPlan,
    PrefixJob,
    ProbeJob,
    TaskSelection,
    default_t_max,
    episode_seed,
    plan_jobs,
    select_tasks,
)
from budget_envs.eval.runner.probe import run_probe
from budget_envs.eval.runner.records import (
    CONFIG_FILE,
    RECORDS_FILE,
    EpisodeRecord,
    PrefixRecord,
    ProbeRecord,
    load_records,
)
from budget_envs.eval.runner.run import RunResult, run_plan
from budget_envs.eval.runner.transcripts import (
    TRANSCRIPTS_FILE,
    load_transcripts,
    replay_row,
    transcript_features,
)

__all__ = [
    "EpisodeJob",
    "EpisodeRecord",
    "EvalPlan",
    "RunResult",
    "TaskSelection",
    "PrefixJob",
    "PrefixRecord",
    "ProbeJob",
    "ProbeRecord",
    "RECORDS_FILE",
    "CONFIG_FILE",
    "TRANSCRIPTS_FILE",
    "agrees",
    "default_t_max",
    "episode_seed",
    "load_records",
    "load_transcripts",
    "plan_jobs",
    "replay_row",
    "run_episode",
    "run_jobs",
    "run_plan",
    "run_probe",
    "select_tasks",
    "transcript",
    "transcript_features",
]
