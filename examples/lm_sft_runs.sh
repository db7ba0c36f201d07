#!/usr/bin/env bash
# A language model that learns from the suite's own demonstrations (docs/reference-results.md,
# "SFT against the untrained model"): the small decoder from scratch, SFT on 300 oracle
# episodes of ToolUse level 1 (world 0, 20% random turns without loss, 2 epochs), then played
# on the reference run's unseen tasks (world 1, 10 tasks x 2 samples, T=10, temperature 0.7)
# beside random. The trained folder's budgetmix_policy.json and metrics.csv are kept in
# study/lm/sft-tooluse/train/ (the weights are not committed: rerun the first command).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
MODEL_DIR=${MODEL_DIR:-runs/tiny-sft-tooluse}
OUT=${OUT:-study/lm/sft-tooluse}
export HF_HUB_OFFLINE=1
[ -f "$MODEL_DIR/budgetmix_policy.json" ] || "$BIN/budgetmix" train BudgetMix/ToolUse-v0 \
  --trainer sft --budget 12 --env-kwargs '{"level": 1, "world_seed": 0}' \
  --sft-kwargs '{"model": "scratch", "episodes": 300, "epochs": 2, "threads": 1}' --out "$MODEL_DIR"
mkdir -p "$OUT/train"
cp "$MODEL_DIR/budgetmix_policy.json" "$MODEL_DIR/metrics.csv" "$OUT/train/"
resume=(); [ -f "$OUT/records.jsonl" ] && resume=(--resume)
"$BIN/budgetmix" eval BudgetMix/ToolUse-v0 --env-kwargs '{"level": 1, "world_seed": 1}' \
  --agent "sft=lm:model=$MODEL_DIR,temperature=0.7,max_tokens=64,concurrency=20" --agent random \
  --tasks 10 --samples 2 --budgets 10 --out "$OUT" --workers 1 --quiet "${resume[@]}"
