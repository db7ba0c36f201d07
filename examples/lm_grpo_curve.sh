#!/usr/bin/env bash
# GRPO from the small decoder's SFT checkpoint under BudgetMix (docs/reference-results.md,
# "GRPO from the SFT checkpoint"): the decoder from scratch is fine-tuned on 300 oracle
# episodes of ToolUse level 1 (world 0) with prompts that do not list the offered actions, then
# trained by GRPO acting by scoring the offered actions (score-mean), T drawn from 4..8 per
# episode, a process reward of 0.1 per turn of progress (a lost task counts 10 turns away),
# saving the policy every 10 steps; the SFT start, every checkpoint and random then play the
# same 20 unseen tasks (world 1), one sample each, at T <= 8, budget hidden, temperature 1.
# Resumable: a rerun skips what exists (training folders and recorded episodes). The trained
# folders' budgetmix_policy.json and metrics.csv are copied to study/lm/grpo-tooluse/train/.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
SFT_DIR=${SFT_DIR:-runs/sft-tooluse-unlisted}
GRPO_DIR=${GRPO_DIR:-runs/grpo-tooluse}
OUT=${OUT:-study/lm/grpo-tooluse}
export HF_HUB_OFFLINE=1
[ -f "$SFT_DIR/budgetmix_policy.json" ] || "$BIN/budgetmix" train BudgetMix/ToolUse-v0 \
  --trainer sft --budget 12 --env-kwargs '{"level": 1, "world_seed": 0}' \
  --sft-kwargs '{"model": "scratch", "episodes": 300, "epochs": 4, "show_actions": false, "threads": 2}' \
  --out "$SFT_DIR"
[ -f "$GRPO_DIR/budgetmix_policy.json" ] || [ -n "${EVAL_ONLY:-}" ] || "$BIN/budgetmix" train \
  BudgetMix/ToolUse-v0 --trainer trl --budget 4..8 --env-kwargs '{"level": 1, "world_seed": 0}' \
  --iterations 40 --batch-size 16 --lr 1e-4 --process-reward 0.1 --checkpoint-every 10 \
  --trl-kwargs "{\"model\": \"$SFT_DIR\", \"actions\": \"score-mean\", \"num_generations\": 4, \"max_completion_length\": 4096, \"process_max_cost\": 10}" \
  --out "$GRPO_DIR"
mkdir -p "$OUT/train"
cp "$SFT_DIR/budgetmix_policy.json" "$OUT/train/sft_policy.json"
cp "$SFT_DIR/metrics.csv" "$OUT/train/sft_metrics.csv"
cp "$GRPO_DIR/metrics.csv" "$OUT/train/grpo_metrics.csv"
agents=(--agent "sft=lm:model=$SFT_DIR,temperature=1,actions=score-mean,threads=1")
for ckpt in "$GRPO_DIR"/checkpoints/step-*; do
  step=$((10#${ckpt##*step-}))
  agents+=(--agent "grpo@$step=lm:model=$ckpt,temperature=1,threads=1")
  cp "$ckpt/budgetmix_policy.json" "$OUT/train/grpo_step-$(printf %04d "$step").json"
done
agents+=(--agent random)
resume=(); [ -f "$OUT/records.jsonl" ] && resume=(--resume)
"$BIN/budgetmix" eval BudgetMix/ToolUse-v0 --env-kwargs '{"level": 1, "world_seed": 1}' \
  "${agents[@]}" --tasks 20 --samples 1 --budgets 8 --out "$OUT" --workers 1 --quiet "${resume[@]}"
