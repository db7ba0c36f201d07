#!/usr/bin/env bash
# The GPU route, on one GPU in a few minutes (outside CI): a few SFT steps of a Hub model on
# oracle demonstrations, then a few evaluation episodes of the result through the lm agent on
# CUDA, then two GRPO steps of the TRL trainer from it, then one study cell at the pipeline
# check's size (`budgetmix study --quick --trainer trl`) from the SFT folder, its arms on CUDA.
#   MODEL   a Hub id or a local model folder (default Qwen/Qwen3-0.6B; offline machines: a
#           folder copied there, e.g. one `budgetmix prepare model smollm2-135m` wrote)
#   OUT     where the runs go (default runs/gpu-check)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
MODEL=${MODEL:-Qwen/Qwen3-0.6B}
OUT=${OUT:-runs/gpu-check}
ENV_ID=BudgetMix/ToolUse-v0
KW='{"level": 1, "world_seed": 0}'
rm -rf "$OUT"; mkdir -p "$OUT"
"$BIN/python" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
time "$BIN/budgetmix" train "$ENV_ID" --trainer sft --budget 12 --env-kwargs "$KW" \
  --sft-kwargs "{\"model\": \"$MODEL\", \"episodes\": 32, \"max_steps\": 8, \"batch_size\": 4}" \
  --out "$OUT/sft"
time "$BIN/budgetmix" eval "$ENV_ID" --env-kwargs '{"level": 1, "world_seed": 1}' --tasks 4 \
  --samples 2 --budgets 8 --out "$OUT/eval" \
  --agent "base=lm:model=$MODEL,device=cuda,dtype=bfloat16,temperature=0.7,concurrency=8" \
  --agent "sft=lm:model=$OUT/sft,device=cuda,dtype=bfloat16,temperature=0.7,concurrency=8"
time "$BIN/budgetmix" train "$ENV_ID" --trainer trl --budget 6 --env-kwargs "$KW" --iterations 2 \
  --trl-kwargs "{\"model\": \"$OUT/sft\"}" --out "$OUT/grpo"
time "$BIN/budgetmix" study --quick --trainer trl --model "$OUT/sft" --device cuda --workers 1 \
  --out "$OUT/study" --docs "$OUT/study/study.md" --no-figures
echo "gpu-check: done ($OUT)"
