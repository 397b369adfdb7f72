#!/usr/bin/env bash
# The asynchronous-vs-synchronous comparison of docs/asynchronous.md: GRPO on 6x6 Sokoban (recipe grpo_sokoban) from
# one shared SFT warm start, the same budget (10 updates x 4 rooms x 4 rollouts) and seeds 0 and 1, both on one vLLM
# engine replica with 1 thread (engine.replica_cpus=1) beside the DeepSpeed learner with 1 thread (OMP_NUM_THREADS=1),
# both with the decoupled objective (old_logprobs=recompute + token TIS), differing only in
#   sync: trainer.asynchronous.max_staleness=0 | async: max_staleness=1
# and held-out success on 64 rooms at iterations 0, 5 and 10. Sequential (one heavy job at a time): ~1 h on 2 cores.
# Then: python scripts/async_comparison.py <out dir>  (table + plot).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/async_comparison}
ITERATIONS=${ITERATIONS:-10}
mkdir -p "$OUT"
BIN=.venv/bin

if [ ! -f "$OUT/sft/model/config.json" ]; then  # the warm start on both cores (its time is not compared)
  OMP_NUM_THREADS=2 "$BIN/agentforge" sft recipe=grpo_sokoban "hydra.run.dir=$OUT/sft" > "$OUT/sft.log" 2>&1
fi
export OMP_NUM_THREADS=1  # the learner's torch threads; the replica takes engine.replica_cpus=1
COMMON="engine.replicas=1 engine.replica_cpus=1 learner.old_logprobs=recompute learner.rollout_correction.is_level=token"
declare -A VARIANTS=(
  [sync]="trainer.asynchronous.max_staleness=0"
  [async1]="trainer.asynchronous.max_staleness=1"
)
for seed in 0 1; do
  for name in sync async1; do
    dir="$OUT/$name-seed$seed"
    [ -f "$dir/summary.json" ] && continue
    # shellcheck disable=SC2086
    "$BIN/agentforge" train recipe=grpo_sokoban trainer.warm_start=false "model.init_from=$OUT/sft/model" \
      trainer.iterations="$ITERATIONS" trainer.eval_every=5 trainer.eval_tasks=64 trainer.checkpoint_every=0 \
      logger.wandb=false seed="$seed" $COMMON ${VARIANTS[$name]} "hydra.run.dir=$dir" > "$OUT/$name-seed$seed.log" 2>&1
  done
done
"$BIN/python" scripts/async_comparison.py "$OUT"
