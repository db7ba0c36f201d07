"""The "GRPO from the SFT checkpoint" section of docs/reference-results.md, from the records and
training logs ``examples/lm_grpo_curve.sh`` leaves in ``study/lm/grpo-tooluse/``.

Every number in the section is computed here from those files.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np

from budget_envs.eval.metrics import bootstrap_pass_at_kt, first_success_matrix

TS = (4, 6, 8)
N_BOOT = 2000


def _episodes(folder: Path) -> list[dict]:
    path = folder / "records.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("record", "episode") == "episode" and not r.get("error")]


def _stop_at(rec: dict, t: int) -> str:
    """How an episode of a budget-hidden run ends under a budget of ``t`` turns."""
    turns = int(rec["turns"])
    if turns <= t and rec.get("won"):
        return "won"
    if turns <= t and rec.get("stop_reason") != "budget":
        return str(rec.get("stop_reason"))
    return "budget"


def _pass1(recs: list[dict], t: int) -> tuple[float, float, float]:
    _, m = first_success_matrix(recs, t)
    mean, low, high = bootstrap_pass_at_kt(m, [1], [t], n_boot=N_BOOT)
    return float(mean[0, 0]), float(low[0, 0]), float(high[0, 0])


def _per_task(recs: list[dict], t: int) -> dict[str, float]:
    out: dict[str, list[int]] = {}
    for r in recs:
        out.setdefault(r["task_id"], []).append(int(_stop_at(r, t) == "won"))
    return {task: float(np.mean(v)) for task, v in out.items()}


def _paired(a: list[dict], b: list[dict], t: int, seed: int = 0) -> str:
    """``a`` - ``b`` Pass@1 at ``t``, a bootstrap over the tasks both played."""
    pa, pb = _per_task(a, t), _per_task(b, t)
    common = sorted(set(pa) & set(pb))
    diff = np.array([pa[k] - pb[k] for k in common])
    rng = np.random.default_rng(seed)
    boots = rng.choice(diff, size=(N_BOOT, diff.size), replace=True).mean(axis=1)
    low, high = np.quantile(boots, [0.025, 0.975])
    return f"{diff.mean():+.3f} [{low:+.3f}, {high:+.3f}] over {diff.size} tasks"


def _step(agent: str) -> int:
    m = re.fullmatch(r"grpo@(\d+)", agent)
    return int(m.group(1)) if m else 0


def _training_rows(path: Path, every: int = 10) -> list[str]:
    """The GRPO log in blocks of ``every`` steps: mean reward, win rate and stop shares."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    out = [
        "| GRPO steps | episodes | mean reward | win rate | won | lost | ended by the budget | "
        "mean T drawn |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for start in range(0, len(rows), every):
        block = rows[start : start + every]
        n = sum(int(r["episodes"]) for r in block)

        def mean(key: str, block=block, n=n) -> float:
            return sum(float(r[key]) * int(r["episodes"]) for r in block) / n

        out.append(
            f"| {block[0]['step']}-{block[-1]['step']} | {n} | {mean('reward'):+.3f} | "
            f"{mean('win_rate'):.3f} | {mean('stop_won'):.0%} | {mean('stop_lost'):.0%} | "
            f"{mean('stop_budget'):.0%} | {mean('budget_mean'):.1f} |"
        )
    return out


def grpo_section(folder: Path, missing: list[str]) -> list[str]:
    """The section's lines (empty, with a line in ``missing``, when the run is not there)."""
    recs = _episodes(folder)
    train = folder / "train"
    if not recs or not (train / "grpo_metrics.csv").is_file():
        missing.append(f"GRPO curve `{folder.relative_to(folder.parents[2])}`")
        return []
    sft = json.loads((train / "sft_policy.json").read_text())
    with open(train / "grpo_metrics.csv", newline="", encoding="utf-8") as fh:
        log = list(csv.DictReader(fh))
    steps = int(log[-1]["step"])
    minutes = float(log[-1]["wall_s"]) / 60
    by_agent: dict[str, list[dict]] = {}
    for r in recs:
        by_agent.setdefault(r["agent"], []).append(r)
    order = sorted((a for a in by_agent if a != "random"), key=_step) + ["random"]
    tasks = len({r["task_id"] for r in recs})
    samples = len(by_agent["sft"]) // max(tasks, 1)
    lines = [
        "",
        "## GRPO from the SFT checkpoint",
        "",
        f"The small decoder ({sft['parameters']:,} parameters, the suite's byte-level BPE "
        f"tokenizer) fine-tuned on {sft['rows']} oracle episodes of ToolUse level 1 (world 0) "
        "with prompts that do not list the offered actions "
        f"({sft['steps']} SFT steps in {sft['wall_s'] / 60:.0f} minutes), then trained by GRPO "
        "acting by scoring the offered actions (the mean log-probability per token), T drawn "
        "from 4..8 per episode (BudgetMix), 16 episodes a step in groups of 4, a process "
        "reward of 0.1 per turn of progress (a lost task counts 10 turns away): "
        f"{steps} GRPO steps in {minutes:.0f} minutes on 2 shared cores. Each checkpoint, the "
        f"SFT start and random played the same {tasks} unseen tasks (world 1) x {samples} "
        f"sample{'' if samples == 1 else 's'}, budget hidden (one run at T=8 gives every "
        "T <= 8), temperature 1. "
        "Commands: `examples/lm_grpo_curve.sh`; records and training logs: "
        "`study/lm/grpo-tooluse/`.",
        "",
        "### Unseen tasks, by checkpoint",
        "",
        "| agent | GRPO step | "
        + " | ".join(f"Pass@1, T={t}" for t in TS)
        + " | at T=8: won | lost | ended by the budget |",
        "|---|---|" + "---|" * len(TS) + "---|---|---|",
    ]
    for agent in order:
        rs = by_agent[agent]
        cells = [f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in (_pass1(rs, t) for t in TS)]
        stops = [_stop_at(r, 8) for r in rs]
        shares = [stops.count(w) / len(stops) for w in ("won", "lost", "budget")]
        step = "-" if agent == "random" else str(_step(agent))
        lines.append(
            f"| {agent} | {step} | "
            + " | ".join(cells)
            + f" | {shares[0]:.0%} | {shares[1]:.0%} | {shares[2]:.0%} |"
        )
    last = order[-2]

    def budget_share(agent: str) -> float:
        stops = [_stop_at(r, 8) for r in by_agent[agent]]
        return stops.count("budget") / len(stops)

    lines += [
        "",
        "95% bootstrap intervals over tasks (2,000 resamples). Stop reasons at T=8 are the "
        "shares of all episodes; an episode that used every turn without winning or losing "
        "ended by the budget.",
        "",
        f"- {last} - sft, Pass@1 at T=8: {_paired(by_agent[last], by_agent['sft'], 8)}.",
        f"- {last} - sft, Pass@1 at T=4: {_paired(by_agent[last], by_agent['sft'], 4)}.",
        f"- Unseen episodes ended by the budget at T=8: {budget_share('sft'):.0%} for the SFT "
        f"start, {budget_share(last):.0%} for {last}.",
        "",
        "### Training episodes (world 0), by blocks of 10 GRPO steps",
        "",
        *_training_rows(train / "grpo_metrics.csv"),
    ]
    return lines


def smollm2_section(folder: Path, missing: list[str]) -> list[str]:
    """The "SmolLM2 through GRPO" section: the path check of ``examples/lm_smollm2_grpo.sh``
    (its metrics per GRPO step and the trained folder's episodes as ``lm:``)."""
    metrics = folder / "metrics.csv"
    if not metrics.is_file():
        missing.append(f"SmolLM2 GRPO path check `{folder.relative_to(folder.parents[2])}`")
        return []
    with metrics.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    settings = json.loads((folder / "policy.json").read_text())
    eps = _episodes(folder)
    lines = [
        "",
        "## SmolLM2 through GRPO",
        "",
        f"SmolLM2-135M-Instruct (Q4_1 weights, dequantized), fully fine-tuned by GRPO on ToolUse "
        f"level 1 (world 0) at T={int(float(rows[0]['budget_mean']))}, acting by scoring the "
        f"offered actions ({settings['actions']}), {int(rows[0]['episodes'])} episodes a step: "
        f"{len(rows)} steps in {float(rows[-1]['wall_s']) / 60:.1f} minutes on 2 shared cores. "
        "It shows the path (the folder trains, saves and plays as `lm:`), not what the steps "
        "teach. Commands: `examples/lm_smollm2_grpo.sh`; logs and records: "
        f"`{folder.relative_to(folder.parents[2])}/`.",
        "",
        "| GRPO step | episodes | mean reward | won | lost | ended by the budget | tokens per episode | minutes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['step']} | {r['episodes']} | {float(r['reward']):+.3f} | "
            f"{float(r['stop_won']):.0%} | {float(r['stop_lost']):.0%} | "
            f"{float(r['stop_budget']):.0%} | {float(r['tokens_mean']):.0f} | "
            f"{float(r['wall_s']) / 60:.1f} |"
        )
    if eps:
        won = sum(bool(e.get("won")) for e in eps)
        raw = (folder / "records.jsonl").read_text().splitlines()
        errors = sum(bool(json.loads(line).get("error")) for line in raw if line.strip())
        lines += [
            "",
            f"The trained folder as `lm:` on {len(eps)} unseen episodes (world 1) at "
            f"T={int(eps[0]['budget'])}: {won} won, {errors} agent errors, "
            f"{np.mean([e['turns'] for e in eps]):.1f} turns per episode.",
        ]
    return lines
