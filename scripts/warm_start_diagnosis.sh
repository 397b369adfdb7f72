#!/usr/bin/env bash
# The Sokoban warm start, diagnosed (docs/learning.md, "The warm start, diagnosed"; issue 34 item 4): the demo's old
# warm start (2 SFT epochs = 6 steps) and a 3x longer one (6 epochs = 18 steps, the demo's now), each evaluated
# paired against the model as shipped on the same 128 held-out demo rooms, the short one also at T=1.0; then how
# each policy moves (scripts/action_profile.py).
#   bash scripts/warm_start_diagnosis.sh [out dir]        ~20 min on a 2-core bf16 CPU
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/warm_start_diagnosis}
AF=${AGENTFORGE:-.venv/bin/agentforge}
mkdir -p "$OUT"
timed() { local start; start=$(date +%s); "$@"; echo "$(( $(date +%s) - start )) s: $*" >> "$OUT/walls.txt"; }
evaluate() {  # evaluate <sft dir> <temperature> <name>
  timed "$AF" eval recipe=sokoban_demo "checkpoint=$1/model" compare=base eval.num_tasks=128 eval.samples_per_task=1 \
    "eval.temperature=$2" logger.wandb=false "hydra.run.dir=$OUT/$3" > "$OUT/$3.log" 2>&1
  grep -E "→" "$OUT/$3.log" | sed "s|^|$3: |"
}
timed "$AF" sft recipe=sokoban_demo sft.epochs=2 logger.wandb=false "hydra.run.dir=$OUT/sft6" > "$OUT/sft6.log" 2>&1
evaluate "$OUT/sft6" 0.4 eval_sft6_t04
evaluate "$OUT/sft6" 1.0 eval_sft6_t10
timed "$AF" sft recipe=sokoban_demo sft.epochs=6 logger.wandb=false "hydra.run.dir=$OUT/sft18" > "$OUT/sft18.log" 2>&1
evaluate "$OUT/sft18" 0.4 eval_sft18_t04
"${PYTHON:-.venv/bin/python}" scripts/action_profile.py "$OUT"/eval_*/trajectories.jsonl
