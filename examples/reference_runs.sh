#!/usr/bin/env bash
# The reference results of a real model (docs/reference-results.md): SmolLM2-135M-Instruct through
# the in-process `lm` agent on every family, 10 unseen tasks x 2 samples, T at most 10, actions
# shown, budget hidden (one run gives every T) and visible (T=10), and ToolUse with the actions
# not shown. Resumable: a rerun skips the episodes already in each run's records.
# Then: python examples/reference_results.py  (writes the page from the records).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
OUT=${OUT:-study/reference}
export HF_HUB_OFFLINE=1
AGENT='smol=lm:model=smollm2-135m,temperature=0.7,max_tokens=32,concurrency=20'
declare -A KW=(
  [tooluse]='BudgetMix/ToolUse-v0|{"level": 1, "world_seed": 1}'
  [webshop]='BudgetMix/WebShop-v0|{"level": 2, "tasks_per_level": 50, "split": "test"}'
  [alfworld]='BudgetMix/ALFWorld-v0|{"level": 1, "tasks_per_level": 50, "split": "valid_seen", "max_receptacles": 12}'
  [textworld]='BudgetMix/TextWorld-v0|{"level": 1, "split": "test"}'
)
run() {  # family visibility agent-spec suffix
  local fam=$1 vis=$2 spec=$3 tag=$4
  local id=${KW[$fam]%%|*} kwargs=${KW[$fam]#*|}
  local dir=$OUT/$fam-$vis$tag
  local resume=(); [ -f "$dir/records.jsonl" ] && resume=(--resume)
  "$BIN/budgetmix" eval "$id" --agent "$spec" --tasks 10 --samples 2 --budgets 10 \
    --visibility "$vis" --env-kwargs "$kwargs" --out "$dir" --workers 1 --quiet "${resume[@]}"
}
for fam in ${FAMILIES:-tooluse webshop alfworld textworld}; do
  run "$fam" hidden "$AGENT" ""
  run "$fam" remaining "$AGENT" ""
done
run tooluse hidden "${AGENT},show_actions=false" "-noactions"
