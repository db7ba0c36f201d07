#!/usr/bin/env bash
# A language model that learns from the suite's own demonstrations (docs/reference-results.md,
# "SFT against the untrained model"): the small decoder from scratch, SFT on oracle episodes of
# the family's train tasks (20% random turns without loss, 2 epochs), then played on the
# reference run's unseen tasks (10 tasks x 2 samples, T=10, temperature 0.7) beside random.
# FAMILY=tooluse (default) or alfworld. The trained folder's budgetmix_policy.json and
# metrics.csv are kept in study/lm/sft-$FAMILY/train/ (the weights are not committed: rerun
# the first command). Resumable: a rerun skips the training and the episodes already recorded.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
FAMILY=${FAMILY:-tooluse}
MODEL=${MODEL:-scratch}
TAG=${TAG:-}
MODEL_DIR=${MODEL_DIR:-runs/sft-$FAMILY$TAG}
OUT=${OUT:-study/lm/sft-$FAMILY$TAG}
export HF_HUB_OFFLINE=1
case $FAMILY in
  tooluse)
    ID=BudgetMix/ToolUse-v0; BUDGET=12; EPISODES=${EPISODES:-300}
    TRAIN_KW='{"level": 1, "world_seed": 0}'
    EVAL_KW='{"level": 1, "world_seed": 1}' ;;
  alfworld)
    ID=BudgetMix/ALFWorld-v0; BUDGET=30; EPISODES=${EPISODES:-150}
    TRAIN_KW='{"level": 1, "tasks_per_level": 150, "split": "train", "max_receptacles": 15}'
    EVAL_KW='{"level": 1, "tasks_per_level": 50, "split": "valid_seen", "max_receptacles": 12}' ;;
  *) echo "FAMILY must be tooluse or alfworld" >&2; exit 2 ;;
esac
SFT_KW=${SFT_KW:-"{\"model\": \"$MODEL\", \"episodes\": $EPISODES, \"epochs\": 2, \"threads\": 1}"}
[ -f "$MODEL_DIR/budgetmix_policy.json" ] || "$BIN/budgetmix" train "$ID" \
  --trainer sft --budget "$BUDGET" --env-kwargs "$TRAIN_KW" \
  --sft-kwargs "$SFT_KW" --out "$MODEL_DIR"
mkdir -p "$OUT/train"
cp "$MODEL_DIR/budgetmix_policy.json" "$MODEL_DIR/metrics.csv" "$OUT/train/"
resume=(); [ -f "$OUT/records.jsonl" ] && resume=(--resume)
"$BIN/budgetmix" eval "$ID" --env-kwargs "$EVAL_KW" \
  --agent "sft=lm:model=$MODEL_DIR,temperature=0.7,max_tokens=32,concurrency=20,threads=${THREADS:-1}" --agent random \
  --tasks 10 --samples 2 --budgets 10 --out "$OUT" --workers 1 --quiet "${resume[@]}"
