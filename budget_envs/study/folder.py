"""The study folder: where each stage writes, and the records the report reads back::

    policies/<family>/<visibility>/s<seed>/warm/     the warm start every arm starts from
    policies/<family>/<visibility>/s<seed>/<arm>/    each arm's policy (base: the warm start)
    policies/<family>/hidden/s<seed>/curve/<arm>~<steps>/  learning-curve checkpoints
    eval/<family>/<visibility>/s<seed>/<run>/       the eval runs while they run (resumable)
    records/<family>__<visibility>__s<seed>.jsonl.gz the finished eval records (committed)
    compare/<family>__<visibility>__<arm>_vs_<base>/ ``budgetmix compare`` of an arm against a base
    tables/*.md, tables/*.csv                       the report's tables (same bytes on a re-run)
    base-sft/                                       a TRL study's SFT base: its record, no weights

Policies and eval run folders are checkpoints, not results: only ``records/`` and ``tables/``
are meant to be committed.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from budget_envs.study.spec import Family


def policy_root(out: Path, fam: Family, vis: str, seed: int) -> Path:
    """The folder of the arms' policies (and warm starts) of one family, visibility and seed."""
    return out / "policies" / fam.name / vis / f"s{seed}"


def warm_root(out: Path, fam: Family, vis: str, seed: int) -> Path:
    """The warm start (the base) every arm of one family, visibility and seed starts from."""
    return policy_root(out, fam, vis, seed) / "warm"


def curve_root(out: Path, fam: Family, vis: str, seed: int) -> Path:
    """Where the learning curve's checkpoint copies of one family, visibility and seed go."""
    return policy_root(out, fam, vis, seed) / "curve"


def records_path(out: Path, fam: Family, vis: str, seed: int) -> Path:
    """The finished eval records of one family, visibility and seed."""
    return out / "records" / f"{fam.name}__{vis}__s{seed}.jsonl.gz"


def compare_dir(out: Path, fam: Family, vis: str, arm: str, base: str) -> Path:
    """The ``compare`` outputs of ``arm`` (B) against ``base`` (A) in one family and visibility."""
    return out / "compare" / f"{fam.name}__{vis}__{arm}_vs_{base}"


#: Where a TRL study keeps the record of the ``--trainer sft`` folder its base is (the folder's
#: ``budgetmix_policy.json`` and ``metrics.csv``; the weights stay where they are).
BASE_RECORD = "base-sft"


def record_folder(out: Path) -> str:
    """The study folder as the page names it: from the repository's root, as its readers run
    the commands (``study`` for an absolute path, the RLlib study's default)."""
    return "study" if out.is_absolute() else out.as_posix()


def keep_base_record(model: str | None, out: Path) -> Path | None:
    """Copy the record of an SFT folder ``model`` into ``out/base-sft/`` (nothing for a model
    that is not one), so the study folder says which base its arms start from."""
    import shutil

    src = Path(model) if model else None
    if src is None or not (src / "budgetmix_policy.json").is_file():
        return None
    record = json.loads((src / "budgetmix_policy.json").read_text(encoding="utf-8"))
    if record.get("trainer") != "sft":
        return None
    dst = out / BASE_RECORD
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("budgetmix_policy.json", "metrics.csv"):
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / name)
    return dst


def base_record(out: Path) -> dict[str, Any] | None:
    """The SFT record a study kept of its base (``out/base-sft/budgetmix_policy.json``), or
    None when the folder has none."""
    path = out / BASE_RECORD / "budgetmix_policy.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    return record if record.get("trainer") == "sft" else None


def agent_name(arm: str, seed: int) -> str:
    """An arm's agent name in the eval records (:func:`load_study_records` drops the seed)."""
    return f"{arm}@s{seed}"


def compress_records(src: Path | Sequence[Path], dst: Path) -> None:
    """Gzip the records of one run (or of several, in order) with a fixed header (no file name,
    no time), one line per record key: a retried episode's earlier error line is dropped, and an
    episode two runs share (the no-fault twins of a fault run) is kept once, from the first."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    latest: dict[str, str] = {}
    for path in [src] if isinstance(src, Path) else src:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                if not record.get("error") and record["key"] not in latest:
                    latest[record["key"]] = line
    tmp = dst.with_suffix(".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as z:
        z.write(("\n".join(latest.values()) + "\n").encode("utf-8"))
    tmp.replace(dst)


def load_study_records(out: str | os.PathLike) -> list[dict[str, Any]]:
    """Every record under ``out/records/``, each with ``study_seed`` and ``study_visibility``.

    The seed is appended to ``task_id`` (``"<task>|s<seed>"``) and dropped from the agent name,
    so an arm's surface pools its seeds and a paired comparison pairs the same task under the
    same training seed: bootstrap intervals then resample (task, seed) units.
    """
    folder = Path(out) / "records"
    paths = sorted(folder.glob("*.jsonl.gz"))
    if not paths:
        raise FileNotFoundError(f"no study records (*.jsonl.gz) in {folder}")
    records = []
    for path in paths:
        family, vis, seed_part = path.name[: -len(".jsonl.gz")].split("__")
        seed = int(seed_part[1:])
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                r = json.loads(line)
                r["study_family"], r["study_visibility"], r["study_seed"] = family, vis, seed
                r["task_id"] = f"{r['task_id']}|s{seed}"
                r["agent"] = r["agent"].split("@s")[0]
                records.append(r)
    return records


def select(
    records: Sequence[dict[str, Any]], family: str, visibility: str, agent: str | None = None
) -> list[dict[str, Any]]:
    """The records of one family and visibility (and of one agent, when given), in order."""
    return [
        r
        for r in records
        if r["study_family"] == family
        and r["study_visibility"] == visibility
        and (agent is None or r["agent"] == agent)
    ]
