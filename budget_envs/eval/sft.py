"""Demonstrations for a supervised warm start: oracle episodes as chat rows, ``DIR/<split>.jsonl``.

:func:`export_sft` plays one episode per task with a reference agent, through the eval harness's
own episode driver, and writes each as the row that ``budgetmix eval --save-transcripts`` writes
(:mod:`budget_envs.eval.runner.transcripts`): the same columns, so the same loaders, chat
templates and :func:`~budget_envs.eval.runner.transcripts.replay_row` apply. The agent is the
oracle, or ``oracle-eps``: the oracle with a share epsilon of uniformly random turns (the
harness's ``oracle:epsilon=E``; plain ``oracle-eps`` is epsilon 0.3, ``oracle-eps0.1`` is 0.1),
whose episodes show mistakes and the recovery after them; each turn's ``oracle_agreed`` says
which turns were the oracle's, for a loss mask.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budget_envs.eval.outdir import ensure_dir, out_dir_error
from budget_envs.eval.runner.folder import RunLock
from budget_envs.eval.runner.inprocess import run_jobs
from budget_envs.eval.runner.plan import EvalPlan, plan_jobs
from budget_envs.eval.runner.records import RecordsWriter
from budget_envs.eval.runner.transcripts import transcript_row

__all__ = ["DEFAULT_EPSILON", "ExportResult", "export_sft", "sft_agent_spec"]

#: The epsilon of plain ``oracle-eps`` (the demo's reference agent).
DEFAULT_EPSILON = 0.3
_EPS = re.compile(r"^oracle-eps(\d*\.?\d*)$")


def sft_agent_spec(agent: str) -> str:
    """The eval agent spec of an export's ``agent``: ``oracle-eps[E]`` is the oracle with
    epsilon E (default :data:`DEFAULT_EPSILON`); any other spec is taken as it is.

    >>> sft_agent_spec("oracle-eps"), sft_agent_spec("oracle-eps0.1"), sft_agent_spec("oracle")
    ('oracle:epsilon=0.3', 'oracle:epsilon=0.1', 'oracle')
    """
    if not isinstance(agent, str) or not agent:
        raise ValueError(f"agent must be a non-empty agent spec, got {agent!r}")
    match = _EPS.match(agent)
    if match is None:
        return agent
    text = match.group(1)
    try:
        epsilon = float(text) if text else DEFAULT_EPSILON
    except ValueError:
        raise ValueError(
            f"agent {agent!r}: oracle-eps takes a number, e.g. oracle-eps0.1"
        ) from None
    return f"oracle:epsilon={epsilon:g}"


@dataclass
class ExportResult:
    """What :func:`export_sft` wrote: ``rows`` rows into ``path``; ``errors`` episodes whose
    agent failed (left out); ``won`` rows of won episodes."""

    path: Path
    rows: int
    won: int
    errors: int


def export_sft(
    env_id: str,
    out_dir: str | os.PathLike[str],
    *,
    tasks: int | list[Any],
    split: str = "train",
    agent: str = "oracle",
    budget: int | None = None,
    visibility: str = "hidden",
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
    on_start: Callable[[int], None] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> ExportResult:
    """Write one ``agent`` episode per task of ``env_id``'s ``split`` to ``out_dir/<split>.jsonl``.

    Args:
        tasks: a count (spread over the family's levels, as ``budgetmix eval --tasks``) or a
            list of task ids or indices.
        split: the env's task split (its ``split=`` keyword) and the file's name.
        agent: ``oracle``, ``oracle-eps[E]`` or any eval agent spec.
        budget: the turn budget (default: the id's T_max); ``visibility`` as in eval.
        env_kwargs: more constructor kwargs; a ``split`` there must equal ``split``.
        seed: the run seed (episode seeds derive from it and the task, as in eval).
        on_start(total), on_row(row): progress hooks.

    The file is written under a temporary name and renamed when whole (an older file of the
    same split is replaced). Raises ``ValueError`` (a bad argument, quoted) and
    :class:`~budget_envs.errors.OutDirError` (a folder that cannot be written).
    """
    kwargs = dict(env_kwargs or {})
    if kwargs.get("split", split) != split:
        raise ValueError(
            f"env_kwargs split {kwargs['split']!r} differs from split {split!r}; give it once"
        )
    if not isinstance(split, str) or not split or "/" in split or split.startswith("."):
        raise ValueError(f"split must be a plain name such as 'train', got {split!r}")
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int) or budget < 1
    ):
        raise ValueError(f"budget must be an int >= 1 or None, got {budget!r}")
    spec = sft_agent_spec(agent)
    from budget_envs.eval.agents import make_agent

    name = make_agent(spec).name
    plan = EvalPlan(
        env_ids=[env_id],
        agents={name: spec},
        tasks=tasks,
        samples=1,
        budgets=None if budget is None else [budget],
        visibility=visibility,
        seed=seed,
        env_kwargs={**kwargs, "split": split},
        transcripts=True,
    )
    jobs = plan_jobs(plan)
    folder = ensure_dir(out_dir, "write the SFT data")
    path = folder / f"{split}.jsonl"
    # The run folder's writer lock, as eval takes it: a second export into this folder is
    # refused (RunInUse) instead of mixing its rows in; and a temp name of this process's own.
    lock = RunLock(folder)
    lock.acquire()
    part = folder / f".{split}.jsonl.{os.getpid()}.part"
    if on_start is not None:
        on_start(len(jobs))
    rows = won = errors = 0
    try:
        with RecordsWriter(part) as out:
            for record in run_jobs(jobs, plan.agents, plan.env_kwargs):
                if record.error or record.transcript is None:
                    errors += 1
                    continue
                row = transcript_row(
                    record, record.transcript, env_kwargs=plan.env_kwargs, agent_spec=spec
                )
                out.write(row)
                rows += 1
                won += bool(row["won"])
                if on_row is not None:
                    on_row(row)
        os.replace(part, path)
    except OSError as exc:
        raise out_dir_error("write", part, exc) from None
    finally:
        if part.exists():
            part.unlink()
        lock.release()
    return ExportResult(path=path, rows=rows, won=won, errors=errors)
