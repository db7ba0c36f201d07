"""Write docs/reference-results.md from the reference runs' records (study/reference/*/).

The runs are made by ``examples/reference_runs.sh`` (resumable); this script only reads their
records, so ``make study-check`` rewrites the page in CI and fails when it differs. Every number
on the page is computed here. A run whose records are missing or incomplete is listed as such.

Usage: ``python examples/reference_results.py [--root study/reference] [--out PATH]``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from lm_grpo_section import grpo_section, smollm2_section  # examples/, beside this script
from lm_step_diagnosis import diagnosis_section

from budget_envs.eval.metrics import bootstrap_pass_at_kt, first_success_matrix
from budget_envs.integrations.lm.models import MODELS

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = [
    ("tooluse", "ToolUse"),
    ("webshop", "WebShop"),
    ("alfworld", "ALFWorld"),
    ("textworld", "TextWorld"),
]
RUNS = [("hidden", ""), ("remaining", ""), ("hidden", "-noactions")]
EXPECTED = 20  # 10 tasks x 2 samples
TS = [1, 2, 3, 5, 8, 10]
N_BOOT = 2000


def _records(folder: Path) -> list[dict]:
    path = folder / "records.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("record", "episode") == "episode"]


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def _interval(mean: float, low: float, high: float) -> str:
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def _paired_difference(vis: list[dict], hid: list[dict], t: int, seed: int = 0) -> str:
    """``vis`` - ``hid`` Pass@1 at ``t`` (two runs' records, e.g. budget shown and hidden): a
    bootstrap over the tasks both ran."""
    if not vis or not hid:
        return "not run"
    tv, mv = first_success_matrix(vis, t)
    th, mh = first_success_matrix(hid, t)
    common = sorted(set(tv) & set(th))
    if not common:
        return "no common tasks"

    def per_task(tasks, m):
        index = {task: i for i, task in enumerate(tasks)}
        rows = np.array([m[index[c]] for c in common])
        ok = rows >= 0
        return np.array([(r[o] > 0).mean() if o.any() else np.nan for r, o in zip(rows, ok)])

    diff = per_task(tv, mv) - per_task(th, mh)
    diff = diff[~np.isnan(diff)]
    rng = np.random.default_rng(seed)
    boots = rng.choice(diff, size=(N_BOOT, diff.size), replace=True).mean(axis=1)
    low, high = np.quantile(boots, [0.025, 0.975])
    return f"{diff.mean():+.3f} [{low:+.3f}, {high:+.3f}] over {diff.size} tasks"


def _invalid_share(folder: Path, recs: list[dict]) -> str:
    """The share of turns the env answered as invalid, read by replaying each episode's actions
    on a fresh env (the records keep actions and observation digests, not the env's verdict)."""
    from budget_envs.eval.runner.transcripts import record_row

    config = json.loads((folder / "config.json").read_text())
    invalid = turns = 0
    for rec in recs:
        if rec.get("error"):
            continue
        row = record_row(rec, env_kwargs=config.get("env_kwargs") or {})
        if row is None:
            return "replay differs"
        turns += len(row["turns"])
        invalid += sum(1 for t in row["turns"] if t["invalid_action"])
    return f"{invalid / turns:.0%}" if turns else "-"


def _row_stats(recs: list[dict]) -> dict:
    turns = sum(int(r["turns"]) for r in recs)
    invalid = sum(1 for r in recs for t in r.get("agent_turns") or [] if t.get("action", "") == "")
    stops: dict[str, int] = {}
    for r in recs:
        stops[str(r.get("stop_reason"))] = stops.get(str(r.get("stop_reason")), 0) + 1
    tokens = [r.get("tokens") or {} for r in recs]
    return {
        "episodes": len(recs),
        "errors": sum(1 for r in recs if r.get("error")),
        "won": sum(1 for r in recs if r.get("won")),
        "turns": turns / max(len(recs), 1),
        "empty": invalid / max(turns, 1),
        "stops": ", ".join(f"{k} {v}" for k, v in sorted(stops.items(), key=lambda kv: -kv[1])),
        "prompt": float(np.mean([t.get("prompt_tokens", 0) for t in tokens])) if tokens else 0.0,
        "completion": float(np.mean([t.get("completion_tokens", 0) for t in tokens]))
        if tokens
        else 0.0,
    }


#: The SFT runs of examples/lm_sft_runs.sh: (folder under study/lm, family, reference run).
SFT_RUNS = (
    ("sft-tooluse", "ToolUse level 1", "tooluse"),
    ("sft-alfworld", "ALFWorld small scenes", "alfworld"),
    ("sft-tooluse-smollm2-lora", "ToolUse level 1", "tooluse"),
    ("sft-alfworld-smollm2-lora", "ALFWorld small scenes", "alfworld"),
)


def _sft_model(meta: dict) -> str:
    st = meta["settings"]
    if st.get("model") == "scratch":
        return (
            f"a small decoder built from scratch (`model=scratch`: {meta['parameters']:,} "
            f"parameters, {st['scratch_layers']} layers of width {st['scratch_hidden']}, the "
            f"suite's byte-level BPE tokenizer of {st['scratch_vocab']:,} tokens)"
        )
    return (
        f"{st.get('model')} with LoRA (`lora=true`, r={st.get('lora_r')}, alpha "
        f"{st.get('lora_alpha')}; {meta['parameters']:,} parameters)"
    )


def _sft_section(folder: Path, family: str, untrained: list[dict] | None, ref: Path) -> list[str]:
    """SFT against the untrained model and random on the same unseen tasks of one family."""
    recs = _records(folder)
    train = folder / "train" / "budgetmix_policy.json"
    if not recs or not train.is_file() or not untrained:
        return []
    meta = json.loads(train.read_text())
    st = meta["settings"]
    by_agent: dict[str, list[dict]] = {}
    for r in recs:
        by_agent.setdefault(r["agent"], []).append(r)
    by_agent["smollm2 (untrained)"] = untrained
    lines = [
        "",
        f"### {family}: {'small decoder' if st.get('model') == 'scratch' else 'SmolLM2 + LoRA'}",
        "",
        f"`--trainer sft` on {_sft_model(meta)}, trained on {meta['rows']} oracle episodes of "
        f"the train tasks ({int(st['explore'] * 100)}% random turns without loss; "
        f"{meta['trained_tokens']:,} of {meta['tokens']:,} tokens labelled), {meta['steps']} "
        f"steps in {meta['wall_s'] / 60:.0f} minutes on 2 shared cores (final mean loss "
        f"{meta['train_loss']:.3f}), then played on the same 10 unseen tasks x 2 samples at T=10 "
        "as the untrained SmolLM2 above (temperature 0.7, the offered actions listed), beside "
        f"random. Run folder: `study/lm/{folder.name}`.",
        "",
        "| agent | Pass@1, T=10 | won | invalid actions |",
        "|---|---|---|---|",
    ]
    for agent, rows in by_agent.items():
        _, m = first_success_matrix(rows, 10)
        mean, low, high = bootstrap_pass_at_kt(m, [1], [10], n_boot=N_BOOT)
        invalid = _invalid_share(folder if agent != "smollm2 (untrained)" else ref, rows)
        won = sum(1 for r in rows if r.get("won"))
        lines.append(
            f"| {agent} | {_interval(mean[0, 0], low[0, 0], high[0, 0])} | {won} of {len(rows)} "
            f"| {invalid} |"
        )
    sft = by_agent.get("sft")
    if sft:
        lines += [
            "",
            f"- sft - untrained SmolLM2: {_paired_difference(sft, untrained, 10)}.",
            f"- sft - random: {_paired_difference(sft, by_agent.get('random', []), 10)}.",
        ]
    return lines


def _sft_sections(runs: dict, missing: list[str]) -> list[str]:
    lines = [
        "",
        "## SFT against the untrained model",
        "",
        "Each model trained on the family's own oracle demonstrations (`examples/lm_sft_runs.sh`; "
        "`FAMILY=alfworld` and `MODEL=smollm2-135m` with LoRA select the others); the intervals "
        "are 95% bootstrap intervals over tasks, the differences paired by task.",
    ]
    for name, family, fam in SFT_RUNS:
        part = _sft_section(
            ROOT / "study" / "lm" / name,
            family,
            runs.get((fam, "hidden", "")),
            ROOT / "study" / "reference" / f"{fam}-hidden",
        )
        if part:
            lines += part
        else:
            missing.append(f"SFT run `study/lm/{name}` ({family})")
    return lines


def write_page(root: Path) -> str:
    label = MODELS["smollm2-135m"].label
    lines = [
        "# Reference results: a real language model",
        "",
        "<!-- Written by examples/reference_results.py from study/reference/*/records.jsonl; "
        "do not edit by hand. -->",
        "",
        f"{label} played every family through the in-process `lm` agent on 2 CPU cores: 10 "
        "unseen tasks x 2 samples per family, at most 10 turns, temperature 0.7, at most 32 "
        "tokens a reply, the offered actions listed under every observation (`show_actions`, "
        "the setting of published ALFWorld and WebShop agent prompts), with the budget hidden "
        "(one run at T=10 gives every T <= 10) and shown (`--visibility remaining`, a run at "
        "T=10), and ToolUse once more without the offered actions. The commands are in "
        "`examples/reference_runs.sh` (resumable); the records are in `study/reference/`.",
        "",
        "This is the untrained model: zero-shot it mostly answers in prose, which is an empty "
        "or unparseable action. It is the floor a fine-tuned model is measured from "
        "([Training](training.md#a-language-model-from-the-suites-demonstrations)).",
        "",
        "## Runs",
        "",
        "| family | setting | episodes | agent errors | won | mean turns | empty actions | "
        "invalid actions | stop reasons | prompt tokens / episode | reply tokens / episode |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    runs: dict[tuple[str, str, str], list[dict]] = {}
    missing = []
    for fam, name in FAMILIES:
        for vis, tag in RUNS:
            if tag and fam != "tooluse":
                continue
            recs = _records(root / f"{fam}-{vis}{tag}")
            setting = ("budget " + ("hidden" if vis == "hidden" else "shown")) + (
                ", actions not listed" if tag else ""
            )
            if len(recs) < EXPECTED:
                missing.append(f"{name}, {setting}: {len(recs)} of {EXPECTED} episodes")
            if not recs:
                continue
            runs[(fam, vis, tag)] = recs
            s = _row_stats(recs)
            invalid = _invalid_share(root / f"{fam}-{vis}{tag}", recs)
            lines.append(
                f"| {name} | {setting} | {s['episodes']} | {s['errors']} | {s['won']} | "
                f"{s['turns']:.1f} | {s['empty']:.0%} | {invalid} | {s['stops']} | "
                f"{s['prompt']:,.0f} | {s['completion']:,.0f} |"
            )
    lines += [
        "",
        "Empty actions: turns whose reply held no action (cut inside its first line, or only "
        "a think block). Invalid actions: turns the env answered as invalid (empty ones "
        "included), read by replaying each episode's actions on a fresh env. Prompt tokens "
        "count only the tokens run through the model (each episode's KV cache is kept).",
        "",
        "## Pass@(1,T), budget hidden",
        "",
        "95% bootstrap interval over tasks (2,000 resamples).",
        "",
        "| family | " + " | ".join(f"T={t}" for t in TS) + " |",
        "|---|" + "---|" * len(TS),
    ]
    for fam, name in FAMILIES:
        recs = runs.get((fam, "hidden", ""))
        if not recs:
            continue
        cells = []
        for t in TS:
            _, m = first_success_matrix(recs, t)
            mean, low, high = bootstrap_pass_at_kt(m, [1], [t], n_boot=N_BOOT)
            cells.append(_interval(mean[0, 0], low[0, 0], high[0, 0]))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Pass@(K,10)",
        "",
        "| family | setting | K=1 | K=2 |",
        "|---|---|---|---|",
    ]
    for (fam, vis, tag), recs in runs.items():
        name = dict(FAMILIES)[fam]
        _, m = first_success_matrix(recs, 10)
        if (m >= 0).sum(axis=1).min() < 2:
            continue
        mean, low, high = bootstrap_pass_at_kt(m, [1, 2], [10], n_boot=N_BOOT)
        setting = ("hidden" if vis == "hidden" else "shown") + (", no actions" if tag else "")
        lines.append(
            f"| {name} | {setting} | {_interval(mean[0, 0], low[0, 0], high[0, 0])} | "
            f"{_interval(mean[1, 0], low[1, 0], high[1, 0])} |"
        )
    lines += ["", "## Budget shown - budget hidden, Pass@1 at T=10", ""]
    for fam, name in FAMILIES:
        vis, hid = runs.get((fam, "remaining", "")), runs.get((fam, "hidden", ""))
        if vis and hid:
            lines.append(f"- {name}: {_paired_difference(vis, hid, 10)}.")
    lines += _sft_sections(runs, missing)
    lines += grpo_section(ROOT / "study" / "lm" / "grpo-tooluse", missing)
    lines += smollm2_section(ROOT / "study" / "lm" / "grpo-smollm2", missing)
    lines += diagnosis_section(ROOT / "study" / "lm" / "step-diagnosis", missing)
    lines += ["", "## Not yet run", ""]
    lines += [f"- {m}" for m in missing] or ["- nothing: every run is complete."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(ROOT / "study" / "reference"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "reference-results.md"))
    args = parser.parse_args()
    Path(args.out).write_text(write_page(Path(args.root)), encoding="utf-8")


if __name__ == "__main__":
    main()
