"""A whole run: the plan into ``config.json``, its records into ``records.jsonl``, resumable.

One writer per run folder (:class:`~budget_envs.eval.runner.folder.RunLock`); ``--resume``
continues only the plan the folder was started with
(:func:`~budget_envs.eval.runner.folder.check_resume`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budget_envs.errors import OutDirError
from budget_envs.eval.outdir import ensure_dir, out_dir_error
from budget_envs.eval.runner.async_driver import preflight_agents
from budget_envs.eval.runner.folder import RunLock, check_resume, plan_config, write_config
from budget_envs.eval.runner.inprocess import run_jobs
from budget_envs.eval.runner.local import iter_process
from budget_envs.eval.runner.plan import EvalPlan, plan_jobs, select_tasks
from budget_envs.eval.runner.prefix import plan_prefix_jobs
from budget_envs.eval.runner.ray_backend import connect, iter_ray
from budget_envs.eval.runner.records import (
    CONFIG_FILE,
    RECORDS_FILE,
    RecordsScan,
    RecordsWriter,
    drop_torn_tail,
    load_records,
    scan_records,
)
from budget_envs.eval.runner.transcripts import TRANSCRIPTS_FILE, open_transcripts

__all__ = ["RunResult", "run_plan"]


@dataclass
class RunResult:
    """What :func:`run_plan` did (counts cover episodes, probes and prefix probes;
    ``prefix_total`` is the prefix probes' share of ``total``)."""

    run_dir: Path
    total: int
    skipped: int
    ran: int
    errors: int
    prefix_total: int = 0
    #: Bad lines of ``records.jsonl`` skipped on resume (see
    #: :func:`~budget_envs.eval.runner.records.scan_records`); their jobs ran again.
    bad_lines: int = 0


def run_plan(
    plan: EvalPlan,
    run_dir: str | os.PathLike[str],
    *,
    workers: int = 1,
    ray: str | None = None,
    resume: bool = False,
    chunk: int | None = None,
    start_method: str | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_record: Callable[[Any], None] | None = None,
) -> RunResult:
    """Run ``plan`` into ``run_dir`` (``config.json`` + ``records.jsonl``).

    Args:
        workers: local processes (1 = in this process).
        ray: ``"auto"``, ``"local"`` or a cluster address to play the episodes on Ray env actors
            (an already initialized Ray is used as is).
        start_method: how local workers start, ``"fork"`` (the default where it exists) or
            ``"spawn"``; the records are the same either way.
        resume: skip episodes already recorded without error; otherwise an existing non-empty
            record file is an error (no silent overwrite, no silent mixing). The plan must be
            the one the folder was started with (``config.json``), else
            :class:`~budget_envs.errors.PlanMismatch` names the fields that differ. Bad lines of
            the records file are skipped with a counted warning (``bad_lines``) and their jobs
            run again.

    One writer per folder: the run holds ``run_dir/.lock`` (:class:`.folder.RunLock`), and a
    second writer gets :class:`~budget_envs.errors.RunInUse` naming the holder's pid. A folder
    that cannot be written (read-only, not a directory, a full disk) raises
    :class:`~budget_envs.errors.OutDirError` in one line; ``config.json`` is written atomically.

    Agents with a ``preflight()`` (the chat agent) are checked first: an unusable endpoint
    raises :class:`~budget_envs.errors.PreflightError` before anything is written. Episodes of
    async agents run concurrently in each process (``concurrency`` requests in flight).
    A plan with ``transcripts`` also writes each episode's chat row to ``transcripts.jsonl``
    (:mod:`~budget_envs.eval.runner.transcripts`), kept in step with the records on resume.
    A plan with ``prefix_turns`` then runs its prefix probes on the failed episodes just
    recorded (:func:`~budget_envs.eval.runner.prefix.plan_prefix_jobs`), on the same back end.
        on_start(total, skipped) and on_record(record): progress hooks (the CLI's progress bar);
        ``on_start`` is called once per phase: the episodes and probes, then the prefix probes.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    run_dir = Path(run_dir)
    records_path = run_dir / RECORDS_FILE
    _check_folder(run_dir, records_path, resume)
    if ray is not None:
        connect(ray)  # fail before anything is written when the cluster is unreachable
    preflight_agents(plan.agents)  # likewise for a dead or wrong LLM endpoint (PreflightError)
    ensure_dir(run_dir, "create the run folder")
    with RunLock(run_dir):
        if not resume and _holds_records(records_path):  # a writer finished in the meantime
            _refuse_overwrite(records_path)
        scan = _recorded(records_path) if resume else None
        records = scan.records if scan is not None else []
        done_keys = {r["key"] for r in records if not r.get("error")}
        all_jobs = _jobs_with_config(plan, run_dir, resume, records)
        jobs = [j for j in all_jobs if j.key not in done_keys]
        skipped = len(all_jobs) - len(jobs)
        if on_start is not None:
            on_start(len(all_jobs), skipped)
        transcripts = None
        if plan.transcripts or (run_dir / TRANSCRIPTS_FILE).exists():
            transcripts = open_transcripts(
                run_dir,
                [r for r in records if r["key"] in done_keys],
                env_kwargs=plan.env_kwargs,
                agents=plan.agents,
                write=plan.transcripts,
            )
        ran, errors, prefix_total, prefix_skipped = _play(
            plan,
            run_dir,
            jobs,
            done_keys,
            transcripts,
            (workers, ray, chunk, start_method),
            on_start,
            on_record,
        )
    return RunResult(
        run_dir=run_dir,
        total=len(all_jobs) + prefix_total,
        skipped=skipped + prefix_skipped,
        ran=ran,
        errors=errors,
        prefix_total=prefix_total,
        bad_lines=scan.bad_lines if scan is not None else 0,
    )


def _check_folder(run_dir: Path, records_path: Path, resume: bool) -> None:
    """Refuse, before anything is written, a folder that is a file, holds another run's records
    without ``resume`` (a live writer named first), or holds files not an eval run's."""
    if run_dir.exists() and not run_dir.is_dir():
        ensure_dir(run_dir, "use as a run folder")  # raises OutDirError: a file is in the way
    if not resume and _holds_records(records_path):
        # A live writer is the news (RunInUse with its pid), else the records are.
        with contextlib.suppress(OutDirError), RunLock(run_dir):
            pass
        _refuse_overwrite(records_path)
    _check_own_files(run_dir)


def _jobs_with_config(
    plan: EvalPlan, run_dir: Path, resume: bool, records: list[dict[str, Any]]
) -> list[Any]:
    """Every job of ``plan``, its ``config.json`` written (on resume, once the plan is checked
    against the folder's)."""
    selections = {e: select_tasks(e, plan.tasks, plan.env_kwargs) for e in plan.env_ids}
    config = plan_config(plan, selections)
    all_jobs = plan_jobs(plan, selections)
    config_path = run_dir / CONFIG_FILE
    if not resume or check_resume(run_dir, config_path, config, records, plan, all_jobs):
        write_config(config_path, config)
    return all_jobs


def _play(
    plan: EvalPlan,
    run_dir: Path,
    jobs: list[Any],
    done_keys: set[str],
    transcripts: Any,
    backend: tuple[int, str | None, int | None, str | None],
    on_start: Callable[[int, int], None] | None,
    on_record: Callable[[Any], None] | None,
) -> tuple[int, int, int, int]:
    """Both phases into the records file, the episodes and probes then the prefix probes:
    (records written, errors among them, prefix probes planned, prefix probes already done)."""
    ran = errors = prefix_total = prefix_skipped = 0
    with _writer(run_dir / RECORDS_FILE) as out, contextlib.ExitStack() as stack:
        if transcripts is not None:
            stack.enter_context(transcripts)
        for phase in ("episodes", "prefix"):
            if phase == "prefix":
                if not plan.prefix_turns:
                    break
                prefix_jobs = plan_prefix_jobs(plan, load_records(run_dir, warn=False))
                jobs = [j for j in prefix_jobs if j.key not in done_keys]
                prefix_total = len(prefix_jobs)
                prefix_skipped = prefix_total - len(jobs)
                if on_start is not None:
                    on_start(prefix_total, prefix_total - len(jobs))
            stream = _stream(plan, jobs, *backend)
            written, failed = _drain(stream, out, transcripts, on_record)
            ran += written
            errors += failed
    return ran, errors, prefix_total, prefix_skipped


def _drain(
    stream: Any, out: RecordsWriter, transcripts: Any, on_record: Callable[[Any], None] | None
) -> tuple[int, int]:
    """Write every record of ``stream`` (its transcript row first): (records, errors)."""
    ran = errors = 0
    try:
        for record in stream:
            if transcripts is not None:
                # First the row: a kill before its record leaves a row that the
                # resume drops, never a recorded episode without its row.
                transcripts.write(record)
            out.write(record)
            ran += 1
            errors += bool(record.error)
            if on_record is not None:
                on_record(record)
    finally:
        # Stop the back end now (a full disk, Ctrl-C): no worker runs on for nothing.
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    return ran, errors


def _recorded(records_path: Path) -> RecordsScan:
    """What a resumed run finds in its records file (a torn last line cut off first)."""
    if records_path.exists():
        try:
            drop_torn_tail(records_path)
        except OSError as exc:
            raise out_dir_error("write", records_path, exc) from None
    return scan_records(records_path)


def _writer(records_path: Path) -> RecordsWriter:
    try:
        return RecordsWriter(records_path)
    except OSError as exc:
        raise out_dir_error("write", records_path, exc) from None


def _check_own_files(run_dir: Path) -> None:
    """Refuse a folder whose ``config.json`` is not an eval run's (a model folder's, say: it
    would be overwritten) or whose records or transcripts are links out of the folder (a resume
    would append to, or read, a file elsewhere)."""
    for name in (RECORDS_FILE, TRANSCRIPTS_FILE, CONFIG_FILE):
        path = run_dir / name
        if path.is_symlink() and run_dir.resolve() not in path.resolve().parents:
            raise OutDirError(
                f"{path} is a link to {path.resolve()}, outside the run folder; a run writes "
                "only files of its own folder: remove the link or choose another folder"
            )
    config_path = run_dir / CONFIG_FILE
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            if (run_dir / RECORDS_FILE).exists():
                return  # a torn config beside records: the resume's own check handles it
            config = None
        if not (isinstance(config, dict) and "env_ids" in config and "agents" in config):
            raise OutDirError(
                f"{config_path} is not the config of an eval run (no env_ids and agents); "
                "writing the run here would overwrite it: choose another folder"
            )


def _holds_records(records_path: Path) -> bool:
    return records_path.exists() and records_path.stat().st_size > 0


def _refuse_overwrite(records_path: Path) -> None:
    """A folder with records takes only ``resume=True`` (no silent overwrite or mixing)."""
    raise FileExistsError(
        f"{records_path} already holds records; pass resume=True (--resume) to continue "
        "that run, or choose a new run directory"
    )


def _stream(
    plan: EvalPlan,
    jobs: list[Any],
    workers: int,
    ray: str | None,
    chunk: int | None,
    start_method: str | None,
) -> Any:
    """The records of ``jobs`` from the chosen back end, as they end."""
    if chunk is None:
        parallel = workers if ray is None else 8
        chunk = max(1, min(16, math.ceil(len(jobs) / max(1, parallel * 4))))
    if ray is not None:
        return iter_ray(jobs, plan.agents, plan.env_kwargs, ray, chunk)
    if workers > 1:
        return iter_process(
            jobs, plan.agents, plan.env_kwargs, workers, chunk, start_method=start_method
        )
    return run_jobs(jobs, plan.agents, plan.env_kwargs)
