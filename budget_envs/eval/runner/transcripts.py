"""Transcripts: every episode of a run as one chat row of ``transcripts.jsonl``.

A row holds the episode's OpenAI-style ``messages`` (:mod:`.shown`), its ``tools``, per turn the
budget left, the fault and the stop reason, and everything that identifies the episode (env id
and kwargs, task, seed, budget, visibility, fault spec and seed, agent), so that
:func:`replay_row` plays its assistant actions again on a fresh env and gets the same
observations. Every column has one type in every row of every family, so
``datasets.load_dataset("json", data_files=...)`` loads a file that mixes them: ``env_kwargs``
and ``fault_spec`` are JSON text, ``tools`` is JSON text or null, and the per-turn values use -1
and ``""`` where there is nothing to say. :func:`transcript_features` gives the features to pass
to ``load_dataset`` for files so large that the loader infers the types from a first chunk
without tool calls.

The driver writes a row just before the episode's record; a run resumed after a kill first drops
the rows whose episode has no record (:func:`open_transcripts`), so no episode has two rows.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from budget_envs.eval.outdir import out_dir_error, write_atomic
from budget_envs.eval.runner.plan import make_env
from budget_envs.eval.runner.records import (
    ClosesOnExit,
    EpisodeRecord,
    RecordsWriter,
    drop_torn_tail,
    obs_digest,
)
from budget_envs.eval.runner.shown import EpisodeShown, message_action, render_messages
from budget_envs.eval.runner.worker import job_env_kwargs

__all__ = [
    "TRANSCRIPTS_FILE",
    "TranscriptsWriter",
    "load_transcripts",
    "open_transcripts",
    "replay_row",
    "row_actions",
    "transcript_features",
    "transcript_row",
]

logger = logging.getLogger(__name__)

TRANSCRIPTS_FILE = "transcripts.jsonl"


def _json_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def transcript_row(
    record: EpisodeRecord | Mapping[str, Any],
    shown: Mapping[str, Any],
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    agent_spec: Any = None,
) -> dict[str, Any]:
    """The row of an episode: its ``record`` (an :class:`EpisodeRecord` or its JSON) and what it
    showed (``shown``: :meth:`~.shown.EpisodeShown.as_dict`)."""
    rec = record if isinstance(record, Mapping) else vars(record)
    actions = list(rec.get("actions") or [])
    agreement = list(rec.get("oracle_agreement") or [None] * len(actions))
    turns = [
        {**entry, "oracle_agreed": -1 if agreed is None else int(bool(agreed))}
        for entry, agreed in zip(shown["turns"], agreement)
    ]
    first = rec.get("first_success_turn")
    faults = job_env_kwargs(_Job(rec))["faults"]
    return {
        "key": str(rec["key"]),
        "env_id": str(rec["env_id"]),
        "env_kwargs": _json_text(dict(env_kwargs or {})),
        "task_id": str(rec["task_id"]),
        "task_index": int(rec["task_index"]),
        "sample": int(rec["sample"]),
        "seed": int(rec["seed"]),
        "budget": int(rec["budget"]),
        "visibility": str(rec["visibility"]),
        "fault_spec": _json_text(faults),
        # The eval's faults have no seed of their own: their draws come from the episode seed.
        "fault_seed": -1 if not faults or faults.get("seed") is None else int(faults["seed"]),
        "agent": str(rec["agent"]),
        "agent_spec": agent_spec if isinstance(agent_spec, str) else _agent_label(agent_spec),
        "messages": render_messages(shown, actions),
        "tools": None if not shown.get("tools") else json.dumps(shown["tools"]),
        "turns": turns,
        "num_turns": len(actions),
        "won": bool(rec.get("won")),
        "first_success_turn": -1 if first is None else int(first),
        "stop_reason": str(rec.get("stop_reason") or ""),
    }


def _agent_label(agent: Any) -> str:
    return "" if agent is None else f"<{type(agent).__name__}>"


class _Job:
    """A record's fields under a job's names (:func:`job_env_kwargs` reads a job)."""

    def __init__(self, rec: Mapping[str, Any]) -> None:
        self.visibility = str(rec["visibility"])
        self.budget = int(rec["budget"])
        self.fault_turn = rec.get("fault_turn")
        kinds = rec.get("fault_kinds")
        self.fault_kinds = None if kinds is None else tuple(kinds)


# ---------------------------------------------------------------------- the file
class TranscriptsWriter(ClosesOnExit):
    """Appends the row of every episode record that has a transcript and no error, one whole
    line each (a :class:`~.records.RecordsWriter` underneath: a full disk cuts the torn line off
    and raises :class:`~budget_envs.errors.RecordsWriteError`)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        env_kwargs: Mapping[str, Any],
        agents: Mapping[str, Any],
    ) -> None:
        self.path = Path(path)
        self.env_kwargs = dict(env_kwargs)
        self.agents = dict(agents)
        try:
            self._out = RecordsWriter(self.path)
        except OSError as exc:
            raise out_dir_error("write", self.path, exc) from None

    @property
    def written(self) -> int:
        return self._out.written

    def write(self, record: Any) -> None:
        if not isinstance(record, EpisodeRecord) or record.error or record.transcript is None:
            return
        self.write_row(
            transcript_row(
                record,
                record.transcript,
                env_kwargs=self.env_kwargs,
                agent_spec=self.agents.get(record.agent),
            )
        )

    def write_row(self, row: dict[str, Any]) -> None:
        self._out.write(row)

    def close(self) -> None:
        self._out.close()


def _row_key(raw: bytes) -> str | None:
    try:
        row = json.loads(raw.decode("utf-8"))
    except ValueError:  # torn JSON, or not UTF-8 (UnicodeDecodeError is a ValueError)
        return None
    key = row.get("key") if isinstance(row, dict) else None
    return key if isinstance(key, str) and key else None


def open_transcripts(
    run_dir: str | os.PathLike[str],
    records: Iterable[Mapping[str, Any]],
    *,
    env_kwargs: Mapping[str, Any],
    agents: Mapping[str, Any],
    write: bool,
) -> TranscriptsWriter | None:
    """Make ``run_dir``'s ``transcripts.jsonl`` agree with its records before a run goes on.

    A line is kept when it is whole and its episode has a record without an error (the first
    such line of each episode); the others (a row whose record a kill cut off, a torn line) are
    dropped, the file rewritten whole. With ``write``, the recorded episodes that have no row
    (recorded before transcripts were asked for) get one by replaying their actions
    (:func:`record_row`), and the writer for the episodes to come is returned.
    """
    path = Path(run_dir) / TRANSCRIPTS_FILE
    done = {
        r["key"]: r
        for r in records
        if r.get("record", "episode") == "episode" and not r.get("error")
    }
    have: set[str] = set()
    if path.exists():
        try:
            drop_torn_tail(path)
            lines = path.read_bytes().splitlines(keepends=True)
        except OSError as exc:
            raise out_dir_error("write", path, exc) from None
        kept = []
        for raw in lines:
            key = _row_key(raw)
            if key is not None and key in done and key not in have:
                have.add(key)
                kept.append(raw)
        if len(kept) != len(lines):
            logger.info(
                "%s: dropped %d rows of episodes without a record", path, len(lines) - len(kept)
            )
            write_atomic(path, b"".join(kept))
    if not write:
        return None
    writer = TranscriptsWriter(path, env_kwargs, agents)
    missing = [rec for key, rec in done.items() if key not in have]
    for rec in missing:
        row = record_row(rec, env_kwargs=env_kwargs, agent_spec=agents.get(rec["agent"]))
        if row is not None:
            writer.write_row(row)
    return writer


def load_transcripts(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every whole row of a run's ``transcripts.jsonl`` (or of that file itself)."""
    path = Path(run_dir)
    path = path / TRANSCRIPTS_FILE if path.is_dir() else path
    rows = []
    with open(path, "rb") as fh:
        for raw in fh:
            if _row_key(raw) is not None:
                rows.append(json.loads(raw))
    return rows


# ---------------------------------------------------------------------- replay
def _play(
    env_id: str,
    *,
    env_kwargs: Mapping[str, Any],
    faults: Any,
    seed: int,
    task_index: int,
    budget: int,
    visibility: str,
    actions: Iterable[str],
) -> dict[str, Any]:
    """Play ``actions`` on a fresh env of these settings; what it showed, and the last info."""
    env = make_env(env_id, budget=budget, visibility=visibility, faults=faults, **dict(env_kwargs))
    try:
        obs, info = env.reset(seed=seed, options={"task_id": task_index, "budget": budget})
        shown = EpisodeShown(env_id, obs, info)
        for action in actions:
            obs, reward, terminated, truncated, info = env.step(action)
            shown.turn(obs, reward, info)
            if terminated or truncated:
                break
        return {"shown": shown.as_dict(), "info": dict(info)}
    finally:
        env.close()


def row_actions(row: Mapping[str, Any]) -> list[str]:
    """The env actions of a row, read from its assistant messages."""
    return [message_action(m) for m in row["messages"] if m["role"] == "assistant"]


def replay_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Play a row's assistant actions again on a fresh env of its settings (env id and kwargs,
    task, seed, budget, visibility, fault spec and seed); returns the row the replay makes, whose
    ``messages``, ``tools``, ``turns`` and ``stop_reason`` equal the row's when the episode
    replays as it was played."""
    faults = json.loads(row["fault_spec"])
    if isinstance(faults, dict) and int(row["fault_seed"]) >= 0:
        faults = {**faults, "seed": int(row["fault_seed"])}
    actions = row_actions(row)
    played = _play(
        row["env_id"],
        env_kwargs=json.loads(row["env_kwargs"]),
        faults=faults,
        seed=int(row["seed"]),
        task_index=int(row["task_index"]),
        budget=int(row["budget"]),
        visibility=str(row["visibility"]),
        actions=actions,
    )
    info = played["info"]
    agreed = [t.get("oracle_agreed", -1) for t in row["turns"]]
    summary = info.get("episode_summary") or {}
    first = int(summary.get("first_success_turn", -1))
    record = {
        **{k: row[k] for k in ("key", "env_id", "task_id", "task_index", "sample", "seed")},
        **{k: row[k] for k in ("budget", "visibility", "agent")},
        "fault_turn": None,  # the fault columns are the row's own (set below)
        "actions": actions[: len(played["shown"]["observations"])],
        "oracle_agreement": [None if a < 0 else bool(a) for a in agreed],
        "won": first >= 1,
        "first_success_turn": first if first >= 1 else None,
        "stop_reason": info.get("stop_reason"),
    }
    out = transcript_row(
        record,
        played["shown"],
        env_kwargs=json.loads(row["env_kwargs"]),
        agent_spec=row["agent_spec"],
    )
    out["fault_spec"], out["fault_seed"] = row["fault_spec"], row["fault_seed"]
    return out


def record_row(
    rec: Mapping[str, Any], *, env_kwargs: Mapping[str, Any], agent_spec: Any = None
) -> dict[str, Any] | None:
    """The row of a recorded episode, made by replaying its actions; None (with a warning) when
    the replay does not show what the record's observation digests say it showed."""
    actions = list(rec.get("actions") or [])
    played = _play(
        str(rec["env_id"]),
        env_kwargs=env_kwargs,
        faults=job_env_kwargs(_Job(rec))["faults"],
        seed=int(rec["seed"]),
        task_index=int(rec["task_index"]),
        budget=int(rec["budget"]),
        visibility=str(rec["visibility"]),
        actions=actions,
    )
    digests = [obs_digest(o) for o in played["shown"]["observations"]]
    if digests != list(rec.get("obs_digests") or []):
        logger.warning("%s: its replay differs from its record; no transcript row", rec["key"])
        return None
    return transcript_row(rec, played["shown"], env_kwargs=env_kwargs, agent_spec=agent_spec)


def transcript_features() -> Any:
    """The ``datasets.Features`` of a transcripts row, for ``load_dataset("json", ...,
    features=transcript_features())``: needed only when a file is so large (over the loader's
    10 MB first chunk) that its first chunk holds no tool call while a later one does."""
    from datasets import Features, Value

    text, number = Value("string"), Value("int64")
    call = {"id": text, "type": text, "function": {"name": text, "arguments": text}}
    message = {"role": text, "content": text, "tool_calls": [call], "tool_call_id": text}
    turn = {
        "turn": number,
        "budget_left": number,
        "fault_kind": text,
        "fault_executed": text,
        "invalid_action": Value("bool"),
        "reward": Value("float64"),
        "stop_reason": text,
        "oracle_agreed": number,
    }
    columns: dict[str, Any] = {
        name: text
        for name in ("key", "env_id", "env_kwargs", "task_id", "visibility", "fault_spec")
    }
    columns.update({name: number for name in ("task_index", "sample", "seed", "budget")})
    columns.update(
        fault_seed=number,
        agent=text,
        agent_spec=text,
        messages=[message],
        tools=text,
        turns=[turn],
        num_turns=number,
        won=Value("bool"),
        first_success_turn=number,
        stop_reason=text,
    )
    return Features(columns)
