#!/usr/bin/env bash
# The policy-objective comparison of docs/objectives.md: GRPO on 6x6 Sokoban (recipe grpo_sokoban) from one shared
# SFT warm start, the same budget (10 iterations x 4 rooms x 4 rollouts) and seeds 0 and 1, with
#   today's objective (vanilla PPO clip, token-mean) | Dr. GRPO (algorithm=dr_grpo) | GSPO | ppo_epochs=2
# and held-out success on 64 rooms at iterations 0, 5 and 10. Sequential (one heavy job at a time): ~3 h on 2 cores.
# Then: python scripts/objective_comparison.py <out dir>  (table + plot).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/objective_comparison}
ITERATIONS=${ITERATIONS:-10}
mkdir -p "$OUT"
BIN=.venv/bin

if [ ! -f "$OUT/sft/model/config.json" ]; then
  "$BIN/agentforge" sft recipe=grpo_sokoban "hydra.run.dir=$OUT/sft" 2>&1 | tee "$OUT/sft.log"
fi
declare -A VARIANTS=(
  [vanilla]=""
  [dr_grpo]="algorithm=dr_grpo"
  [gspo]="learner.loss.policy_loss=gspo"
  [ppo_epochs2]="learner.ppo_epochs=2 learner.mini_batch_size=32"
)
for seed in 0 1; do
  for name in vanilla dr_grpo gspo ppo_epochs2; do
    dir="$OUT/$name-seed$seed"
    [ -f "$dir/summary.json" ] && continue
    # shellcheck disable=SC2086
    "$BIN/agentforge" train recipe=grpo_sokoban trainer.warm_start=false "model.init_from=$OUT/sft/model" \
      trainer.iterations="$ITERATIONS" trainer.eval_every=5 trainer.eval_tasks=64 trainer.checkpoint_every=0 \
      logger.wandb=false seed="$seed" ${VARIANTS[$name]} "hydra.run.dir=$dir" > "$OUT/$name-seed$seed.log" 2>&1
  done
done
"$BIN/python" scripts/objective_comparison.py "$OUT"
