"""Records of a run: one JSON line per finished episode or probe, and how to read them back.

The driver alone appends to ``records.jsonl``, one flushed line per record, so a killed run
loses at most the line it was writing (:func:`load_records` skips a torn last line).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CONFIG_FILE", "RECORDS_FILE", "EpisodeRecord", "ProbeRecord", "load_records"]

logger = logging.getLogger(__name__)

RECORDS_FILE = "records.jsonl"
CONFIG_FILE = "config.json"


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


def obs_digest(obs: str) -> str:
    """A short stable digest of an observation (episode records keep one per turn)."""
    return hashlib.sha256(obs.encode("utf-8", "replace")).hexdigest()[:16]


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


def drop_torn_tail(path: Path) -> None:
    """Cut a last line that a killed run left without its newline (appends must start clean)."""
    with open(path, "rb+") as fh:
        data = fh.read()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            logger.warning("dropping a torn last record of %d bytes in %s", len(data) - cut, path)
            fh.truncate(cut)
