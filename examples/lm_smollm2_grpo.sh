#!/usr/bin/env bash
# SmolLM2-135M-Instruct through GRPO on CPU (docs/reference-results.md, "SmolLM2 through
# GRPO"): the prepared model, fully fine-tuned, 2 GRPO steps on ToolUse level 1 (world 0) at
# T=6, 4 episodes a step in one group of 4, acting by scoring the offered actions
# (score-mean). It shows the path works (the folder trains, saves, and plays as lm:), not
# what 2 steps teach. The folder's budgetmix_policy.json and metrics.csv are copied to
# study/lm/grpo-smollm2/. Resumable: a finished folder is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
GRPO_DIR=${GRPO_DIR:-runs/grpo-smollm2}
OUT=${OUT:-study/lm/grpo-smollm2}
export HF_HUB_OFFLINE=1
MODEL=$("$BIN/budgetmix" prepare model smollm2-135m | tail -1)
[ -f "$GRPO_DIR/budgetmix_policy.json" ] || "$BIN/budgetmix" train BudgetMix/ToolUse-v0 \
  --trainer trl --budget 6 --env-kwargs '{"level": 1, "world_seed": 0}' \
  --iterations 2 --batch-size 4 --lr 1e-5 \
  --trl-kwargs "{\"model\": \"$MODEL\", \"actions\": \"score-mean\", \"num_generations\": 4, \"max_completion_length\": 2048}" \
  --out "$GRPO_DIR"
mkdir -p "$OUT"
cp "$GRPO_DIR/budgetmix_policy.json" "$OUT/policy.json"
cp "$GRPO_DIR/metrics.csv" "$OUT/metrics.csv"
# the trained folder plays as lm: on unseen tasks (world 1), a smoke check of the round trip
resume=(); [ -f "$OUT/records.jsonl" ] && resume=(--resume)
"$BIN/budgetmix" eval BudgetMix/ToolUse-v0 --env-kwargs '{"level": 1, "world_seed": 1}' \
  --agent "grpo=lm:model=$GRPO_DIR,temperature=1,threads=2" --tasks 2 --samples 1 --budgets 6 \
  --out "$OUT" --workers 1 --quiet "${resume[@]}"
