"""What a reader can check without the weights: one ``train.json`` per trained policy (env
steps, gradient updates, learning rate, the sha256 of the checkpoint it started from and of the
one it ended with) and its metrics CSV, committed under
``<study>/policies/<family>__<visibility>__s<seed>/<arm>/`` beside the ignored weight folders
(``<study>/policies/<family>/<visibility>/s<seed>/``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from budget_envs.study.spec import BASE, IMITATION, Family

#: The record of one trained policy.
TRAIN_FILE = "train.json"
#: The metrics file of each kind of arm in its policy folder (copied beside ``train.json``).
METRICS_OF = {BASE: "warm_start.csv", IMITATION: "imitation.csv"}
RL_METRICS = "metrics.csv"


def record_dir(out: Path, fam: Family, vis: str, seed: int, arm: str) -> Path:
    """Where ``arm``'s ``train.json`` and metrics CSV of (family, visibility, seed) go."""
    return out / "policies" / f"{fam.name}__{vis}__s{seed}" / arm


def tree_sha256(folder: Path) -> str:
    """sha256 over a folder's files: each file's relative path and content hash, in path order
    (a checkpoint's identity, whatever its layout)."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(path.relative_to(folder).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def train_record(
    fam: Family, vis: str, seed: int, arm: str, policy: Path, start: Path | None
) -> dict[str, Any]:
    """``train.json`` of ``arm``'s finished policy folder ``policy`` (RLlib), trained from the
    checkpoint folder ``start`` (None: from scratch, the base's warm start)."""
    from budget_envs.integrations.rllib.training import POLICY_FILE, read_metrics

    meta = json.loads((policy / POLICY_FILE).read_text(encoding="utf-8"))
    settings = meta.get("settings", {})
    out: dict[str, Any] = {"family": fam.name, "visibility": vis, "seed": seed, "arm": arm}
    if arm in (BASE, IMITATION):
        fit = meta.get("warm_start" if arm == BASE else "imitation") or {}
        states = int(fit.get("states", 0))
        out.update(
            kind="imitation",
            env_steps=int(fit.get("env_steps", states + int(fit.get("skipped_states", 0)))),
            episodes=int(fit.get("episodes", 0)),
            gradient_updates=int(fit.get("gradient_updates", 0)),
            epochs=fit.get("epochs"),
            lr=settings.get("warm_start_lr"),
            final_loss=fit.get("final_loss"),
        )
    else:
        rows = read_metrics(policy)
        batch, minibatch = int(settings["train_batch_size"]), int(settings["minibatch_size"])
        out.update(
            kind="ppo",
            iterations=len(rows),
            env_steps=int(rows[-1]["timesteps"]) if rows else 0,
            gradient_updates=len(rows) * int(settings["num_epochs"]) * -(-batch // minibatch),
            lr=settings.get("lr"),
            entropy_coeff=settings.get("entropy_coeff"),
            process_reward=settings.get("process_reward"),
        )
    out["budget"] = meta.get("budget")
    out["start_sha256"] = tree_sha256(start / "checkpoint") if start is not None else None
    out["result_sha256"] = tree_sha256(policy / "checkpoint")
    return out


def weights_sha256(folder: Path) -> str:
    """sha256 of a Hugging Face model folder's weights and config (what a TRL policy is; its
    logs and tokenizer files aside), as :func:`tree_sha256` over those files."""
    h = hashlib.sha256()
    names = sorted(
        p for p in folder.glob("*") if p.name == "config.json" or p.suffix == ".safetensors"
    )
    for path in names:
        h.update(path.name.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def trl_train_record(
    fam: Family, vis: str, seed: int, arm: str, policy: Path, start: Path | None, lr: float
) -> dict[str, Any]:
    """``train.json`` of a TRL study's policy folder: the base (the warm start or the model it
    was given, no GRPO step) or an RL arm (GRPO steps, the env steps its episodes took, from its
    ``metrics.csv``), trained from ``start`` (None: the base)."""
    import csv

    out: dict[str, Any] = {"family": fam.name, "visibility": vis, "seed": seed, "arm": arm}
    rows: list[dict[str, str]] = []
    if (policy / RL_METRICS).is_file():
        with open(policy / RL_METRICS, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    meta = json.loads((policy / "budgetmix_policy.json").read_text(encoding="utf-8"))
    if arm == IMITATION:
        out.update(
            kind="sft",
            episodes=int(meta.get("rows", 0)),
            env_steps=int(meta.get("env_steps", 0)),
            gradient_updates=int(meta.get("steps", 0)),
            lr=(meta.get("settings") or {}).get("learning_rate"),
        )
    elif arm == BASE or not rows:
        out.update(kind="start", env_steps=None, iterations=0, gradient_updates=0, lr=None)
    else:
        episodes = sum(int(r["episodes"]) for r in rows)
        steps = sum(float(r["turns_mean"]) * int(r["episodes"]) for r in rows)
        out.update(
            kind="grpo",
            iterations=len(rows),
            episodes=episodes,
            env_steps=int(round(steps)),
            gradient_updates=len(rows),
            lr=lr,
        )
    trained = policy / "study_train.json"  # the TRL stage's summary: a TRL folder's budget
    summary = json.loads(trained.read_text(encoding="utf-8")) if trained.is_file() else {}
    out["budget"] = meta.get("budget", summary.get("budget"))
    if summary.get("wall_time") is not None:  # minutes of the cell, on the page
        out["wall_time"] = round(float(summary["wall_time"]), 1)
    out["start_sha256"] = weights_sha256(start) if start is not None else None
    out["result_sha256"] = weights_sha256(policy)
    return out


def write_train_record(
    out: Path,
    fam: Family,
    vis: str,
    seed: int,
    arm: str,
    policy: Path,
    start: Path | None,
    *,
    trl_lr: float | None = None,
) -> Path:
    """Write ``train.json`` into the policy folder and, with the metrics CSV, into
    :func:`record_dir`; return the latter's ``train.json``. A TRL policy folder (``trl_lr``
    given: its GRPO learning rate) gets :func:`trl_train_record`."""
    if trl_lr is not None:
        record = trl_train_record(fam, vis, seed, arm, policy, start, trl_lr)
    else:
        record = train_record(fam, vis, seed, arm, policy, start)
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    (policy / TRAIN_FILE).write_text(text, encoding="utf-8")
    where = record_dir(out, fam, vis, seed, arm)
    where.mkdir(parents=True, exist_ok=True)
    (where / TRAIN_FILE).write_text(text, encoding="utf-8")
    metrics = policy / (RL_METRICS if trl_lr is not None else METRICS_OF.get(arm, RL_METRICS))
    if metrics.exists():
        shutil.copyfile(metrics, where / metrics.name)
    return where / TRAIN_FILE
