"""Records of a run: one JSON line per finished episode or probe, and how to read them back.

The driver alone appends to ``records.jsonl``, one flushed line per record, so a killed run
loses at most the line it was writing. :func:`load_records` skips a torn line, and any other bad
line, with a warning that counts them (:func:`scan_records` returns the count). When the file
cannot grow (a full disk), :class:`RecordsWriter` cuts the torn part off at once and raises
:class:`~budget_envs.errors.RecordsWriteError`: the file holds whole records only, and
``--resume`` finishes the run.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from budget_envs.errors import RecordsWriteError
from budget_envs.eval.runner.plan import EpisodeJob, PrefixJob, ProbeJob

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "CONFIG_FILE",
    "RECORDS_FILE",
    "EpisodeRecord",
    "PrefixRecord",
    "ProbeRecord",
    "RecordsScan",
    "RecordsWriter",
    "episode_record",
    "error_record",
    "fault_record",
    "first_success",
    "load_records",
    "prefix_record",
    "probe_record",
    "record_json",
    "scan_records",
]

logger = logging.getLogger(__name__)

RECORDS_FILE = "records.jsonl"
CONFIG_FILE = "config.json"


def first_success(summary: dict[str, Any] | None) -> int | None:
    """The first success turn of ``info["episode_summary"]`` as a record keeps it: ``None``
    when the episode was not won (info says -1, ``NO_TURN``, so vector envs can batch it)."""
    turn = (summary or {}).get("first_success_turn")
    return None if turn is None or int(turn) < 1 else int(turn)


def fault_record(fault: dict[str, Any]) -> dict[str, Any]:
    """An ``info["faults"]`` entry as a record keeps it: ``executed`` None when nothing ran and
    the costs None without an oracle (info says ``""`` and -1, typed for vector envs)."""
    out = dict(fault)
    if out.get("executed") == "":
        out["executed"] = None
    for key in ("cost_before", "cost_after"):
        if key in out and out[key] is not None and int(out[key]) < 0:
            out[key] = None
    return out


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
    #: LLM agents: one dict per request (finish_reason, token usage, reasoning; see
    #: :meth:`budget_envs.eval.chat.ChatEpisode.turn_log`); None for other agents.
    agent_turns: list[dict[str, Any]] | None = None
    #: ``info["stop_reason"]`` of the last step: won, lost or budget (None after an agent error).
    stop_reason: str | None = None
    #: The agent's actions, in order (a failed episode's prefix is replayed from them).
    actions: list[str] | None = None
    #: Per turn: a digest of the observation (:func:`obs_digest`) and the oracle cost-to-go
    #: after it (None without an oracle); a replayed prefix is checked against them.
    obs_digests: list[str] | None = None
    costs: list[int | None] | None = None
    #: Per turn: ``info["state_hash"]`` after it (None where the env gives none); a replayed
    #: prefix must reach the same hash at its turn t.
    state_hashes: list[str | None] | None = None
    #: When the plan asks for transcripts: what the episode showed (the reset's system prompt,
    #: first message and tools, every observation, per-turn budget and faults), which the driver
    #: writes to ``transcripts.jsonl`` (:mod:`.transcripts`); never written to ``records.jsonl``.
    #: Not a field: set on the instance only when asked for, so a record without it is exactly
    #: the fields that ``records.jsonl`` holds.
    transcript: ClassVar[dict[str, Any] | None] = None


@dataclass
class ProbeRecord:
    """One single-step probe: the agent's action from the state after ``prefix_turns`` oracle
    turns (with ``fault``, and one more oracle action that the fault replaced: off the path)."""

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
    #: Off-path probes: the fault kind, and what it did to its turn (``"replaced"``: another
    #: action ran; ``"dropped"``: none did, the agent was told its action failed).
    fault: str | None = None
    fault_effect: str | None = None
    key: str = ""
    record: str = "probe"


@dataclass
class PrefixRecord:
    """One prefix probe: ``agent`` plays on after ``prefix_turns`` turns of ``source``'s failed
    episode (``source_key``). ``reached``: the replay arrived at the recorded state at turn t
    (observation digest, oracle cost-to-go and ``state_hash``; ``state_hash`` is the replay's).
    ``prefix_digest`` identifies the replayed actions, so two agents' probes of the same prefix
    can be paired (``budgetmix compare``)."""

    env_id: str
    task_id: str
    task_index: int
    seed: int
    budget: int
    agent: str
    source: str
    prefix_turns: int
    reached: bool
    damage: int | None
    won: bool
    first_success_turn: int | None
    turns: int
    stop_reason: str | None
    wall_time: float
    actions: list[str] | None = None
    tokens: dict[str, int] | None = None
    error: str | None = None
    key: str = ""
    record: str = "prefix"
    visibility: str = "hidden"
    source_key: str = ""
    prefix_digest: str = ""
    state_hash: str | None = None


def prefix_digest(actions: list[str]) -> str:
    """A short stable digest of a replayed action prefix."""
    text = json.dumps(list(actions), separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


def obs_digest(obs: str) -> str:
    """A short stable digest of an observation (episode records keep one per turn)."""
    return hashlib.sha256(obs.encode("utf-8", "replace")).hexdigest()[:16]


def _from_job(job: EpisodeJob | ProbeJob | PrefixJob, *names: str) -> dict[str, Any]:
    """The fields every record copies from its job (env, task, seed, agent, key), plus ``names``."""
    fields = ("env_id", "task_id", "task_index", "seed", "agent", *names)
    return {name: getattr(job, name) for name in fields} | {"key": job.key}


def episode_record(
    job: EpisodeJob,
    *,
    turns: int = 0,
    won: bool = False,
    first_success_turn: int | None = None,
    faults: list[dict[str, Any]] | None = None,
    oracle_agreement: list[bool | None] | None = None,
    wall_time: float = 0.0,
    tokens: dict[str, int] | None = None,
    error: str | None = None,
    **per_turn: Any,
) -> EpisodeRecord:
    """The record of an episode of ``job`` (the defaults: a job that never played).

    ``per_turn`` holds the optional per-turn fields of :class:`EpisodeRecord` (``actions``,
    ``obs_digests``, ``costs``, ``state_hashes``, ``agent_turns``, ``stop_reason``).
    """
    return EpisodeRecord(
        **_from_job(job, "sample", "budget", "visibility", "fault_turn"),
        fault_kinds=None if job.fault_kinds is None else list(job.fault_kinds),
        turns=turns,
        won=won,
        first_success_turn=first_success_turn,
        faults=[] if faults is None else faults,
        oracle_agreement=oracle_agreement,
        wall_time=wall_time,
        tokens=tokens,
        error=error,
        **per_turn,
    )


def probe_record(
    job: ProbeJob,
    *,
    action: str | None = None,
    correct: bool | None = None,
    progress: bool | None = None,
    cost_before: int | None = None,
    wall_time: float = 0.0,
    tokens: dict[str, int] | None = None,
    error: str | None = None,
    fault_effect: str | None = None,
) -> ProbeRecord:
    """The record of a single-step probe of ``job`` (the defaults: a probe that never ran)."""
    return ProbeRecord(
        **_from_job(job, "prefix_turns", "fault"),
        fault_effect=fault_effect,
        action=action,
        correct=correct,
        progress=progress,
        cost_before=cost_before,
        wall_time=wall_time,
        tokens=tokens,
        error=error,
    )


def prefix_record(
    job: PrefixJob,
    *,
    reached: bool = False,
    damage: int | None = None,
    first_success_turn: int | None = None,
    turns: int = 0,
    stop_reason: str | None = None,
    wall_time: float = 0.0,
    actions: list[str] | None = None,
    tokens: dict[str, int] | None = None,
    error: str | None = None,
    state_hash: str | None = None,
) -> PrefixRecord:
    """The record of a prefix probe of ``job`` (the defaults: a replay that never ran). A probe
    counts as won only when the replay reached the recorded state and the agent did not fail."""
    source = job.source
    return PrefixRecord(
        **_from_job(job, "budget", "prefix_turns", "visibility"),
        source=str(source.get("agent", "")),
        reached=bool(reached),
        damage=damage,
        won=bool(reached and first_success_turn is not None and error is None),
        first_success_turn=first_success_turn if reached else None,
        turns=turns,
        stop_reason=stop_reason,
        wall_time=wall_time,
        actions=actions,
        tokens=tokens,
        error=error,
        source_key=str(source.get("key", "")),
        prefix_digest=prefix_digest(list(source.get("actions") or [])[: job.prefix_turns]),
        state_hash=state_hash,
    )


def error_record(
    job: EpisodeJob | ProbeJob | PrefixJob, message: str
) -> EpisodeRecord | ProbeRecord | PrefixRecord:
    """The record of a job that could not run to its end (``--resume`` runs it again)."""
    if isinstance(job, PrefixJob):
        return prefix_record(job, error=message)
    if isinstance(job, ProbeJob):
        return probe_record(job, error=message)
    return episode_record(job, error=message)


#: Why :func:`scan_records` skipped a line, in the order they are checked.
BAD_LINE_REASONS = ("not UTF-8", "torn JSON", "not an object", "no key", "no env_id/agent/task_id")


@dataclass
class RecordsScan:
    """What :func:`scan_records` read: the whole records, and the bad lines it skipped.

    ``skipped`` counts the bad lines by reason (:data:`BAD_LINE_REASONS`); their jobs count as not
    run, so ``--resume`` runs them again and a report leaves them out.
    """

    path: Path
    records: list[dict[str, Any]]
    skipped: dict[str, int]

    @property
    def bad_lines(self) -> int:
        return sum(self.skipped.values())

    def summary(self) -> str:
        """``"3 bad lines (1 torn JSON, 2 no key)"``, or ``""`` when there were none."""
        if not self.bad_lines:
            return ""
        parts = ", ".join(f"{n} {why}" for why, n in self.skipped.items())
        return f"{self.bad_lines} bad line{'s' if self.bad_lines != 1 else ''} ({parts})"


def _why_bad(raw: bytes) -> tuple[str | None, Any]:
    """``(None, record)`` for a good line, else ``(reason, None)``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8", None
    try:
        rec = json.loads(text)
    except ValueError:
        return "torn JSON", None
    if not isinstance(rec, dict):
        return "not an object", None
    if not isinstance(rec.get("key"), str) or not rec["key"]:
        return "no key", None
    if not all(isinstance(rec.get(name), str) for name in ("env_id", "agent", "task_id")):
        return "no env_id/agent/task_id", None
    return None, rec


def records_path(run_dir: str | os.PathLike[str]) -> Path:
    """The records file of ``run_dir`` (a run folder, or the file itself)."""
    return Path(run_dir) / RECORDS_FILE if Path(run_dir).is_dir() else Path(run_dir)


def scan_records(run_dir: str | os.PathLike[str], *, warn: bool = True) -> RecordsScan:
    """Every whole record of a run, and a count of the bad lines skipped.

    A bad line is one that is not UTF-8, not JSON (a line torn by a kill or a full disk), not a
    JSON object, or a record without its ``key`` or its ``env_id``, ``agent`` and ``task_id``. It
    is skipped, never fatal; one warning (unless ``warn`` is False) gives the count by reason.
    """
    path = records_path(run_dir)
    scan = RecordsScan(path=path, records=[], skipped={})
    if not path.exists():
        return scan
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.strip():
                continue
            why, rec = _why_bad(raw.strip())
            if why is None:
                scan.records.append(rec)
            else:
                scan.skipped[why] = scan.skipped.get(why, 0) + 1
    scan.skipped = {why: scan.skipped[why] for why in BAD_LINE_REASONS if why in scan.skipped}
    if scan.bad_lines and warn:
        logger.warning(
            "skipped %s in %s: a job whose record was on one counts as not run (--resume runs "
            "it again)",
            scan.summary(),
            path,
        )
    return scan


def load_records(run_dir: str | os.PathLike[str], *, warn: bool = True) -> list[dict[str, Any]]:
    """Every record of a run. Bad lines (a torn line from a killed run, a line that is not
    UTF-8, not an object, or has no ``key``) are skipped with one warning that counts them;
    :func:`scan_records` returns the count too."""
    return scan_records(run_dir, warn=warn).records


def drop_torn_tail(path: Path) -> None:
    """Cut a last line that a killed run left without its newline (appends must start clean)."""
    with open(path, "rb+") as fh:
        data = fh.read()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            logger.warning("dropping a torn last record of %d bytes in %s", len(data) - cut, path)
            fh.truncate(cut)


def record_json(record: Any) -> dict[str, Any]:
    """A record as its ``records.jsonl`` line holds it (fields marked ``jsonl: False`` left out)."""
    if isinstance(record, dict):
        return record
    return {
        f.name: getattr(record, f.name) for f in fields(record) if f.metadata.get("jsonl", True)
    }


class ClosesOnExit:
    """A writer that a ``with`` block closes at its end (through the writer's ``close``)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RecordsWriter(ClosesOnExit):
    """Append records to a run's ``records.jsonl``, one whole line each, or fail cleanly.

    Each line goes out in unbuffered writes straight to the file. If a write fails (``ENOSPC``,
    ``EFBIG`` under a file-size limit, ``EIO``), the file is cut back to where the line began
    (truncating needs no space) and :class:`~budget_envs.errors.RecordsWriteError` says so in one
    line. ``written`` counts the records this writer appended.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.written = 0
        self._fh = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed by close()

    def write(self, record: Any) -> None:
        """Append ``record`` (a record dataclass or a dict) as one JSON line."""
        data = (json.dumps(record_json(record)) + "\n").encode()
        start = self._fh.seek(0, os.SEEK_END)
        view = memoryview(data)
        try:
            while view:
                n = self._fh.write(view)
                if not n:  # a raw write of 0 bytes: the file cannot take more
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[n:]
        except OSError as exc:
            self._cut(start)
            reason = exc.strerror or str(exc)
            name = errno.errorcode.get(exc.errno, "") if exc.errno else ""
            err = RecordsWriteError(
                f"cannot write to {self.path}: {reason}{f' ({name})' if name else ''}; "
                f"{self.written} records of this run were saved and every record in the file is "
                "whole. Free some space (or lift the file-size limit) and rerun with --resume to "
                "finish the run."
            )
            err.errno = exc.errno
            raise err from exc
        self.written += 1

    def _cut(self, size: int) -> None:
        try:
            self._fh.truncate(size)
        except OSError:  # pragma: no cover - the torn tail is then dropped on --resume
            logger.warning("could not cut the torn record off %s", self.path, exc_info=True)

    def close(self) -> None:
        self._fh.close()
