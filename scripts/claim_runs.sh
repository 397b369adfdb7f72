#!/usr/bin/env bash
# Every training run behind a learning claim in README.md and docs/ (issue 55): each is run once, timed, and its
# per-task outcomes committed to docs/results/ (scripts/claim_run.py); scripts/results_tables.py then rebuilds the
# tables. One run at a time (2 cores). Groups:
#   bash scripts/claim_runs.sh demo positions arithmetic per_hour frozenlake
# A run whose summary.json exists is skipped (delete its run dir to redo it). Run dirs: runs/claims/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
ROOT=${ROOT:-runs/claims}
SEEDS=${SEEDS:-"0 1 2"}

claim() {  # claim <name> <run dir> <overrides...>
  local name=$1 dir=$2; shift 2
  if [ -f "$dir/summary.json" ]; then echo "skip $name ($dir done)"; return; fi
  rm -rf "$dir"
  $PY scripts/claim_run.py --name "$name" --run-dir "$dir" -- "$@"
}

demo() {
  claim demo/sokoban_demo "$ROOT/demo" recipe=sokoban_demo
}

positions() {  # GiGPO and GRPO on the positions warm start, 3 training seeds each
  for s in $SEEDS; do
    claim "sokoban_positions/gigpo_s$s" "$ROOT/pos_gigpo_s$s" recipe=gigpo_sokoban_positions seed="$s"
    claim "sokoban_positions/grpo_s$s" "$ROOT/pos_grpo_s$s" recipe=gigpo_sokoban_positions algorithm=grpo seed="$s"
  done
}

arith_row() {  # arith_row <row name> <overrides...>: one row of the learning-per-hour table, every seed
  local row=$1; shift
  for s in $SEEDS; do
    claim "arithmetic/${row}_s$s" "$ROOT/arith_${row}_s$s" recipe=grpo_reasoning_gym_arithmetic seed="$s" \
      trainer.eval_every=80 "$@"
  done
}

arithmetic() {
  arith_row recipe
}

per_hour() {  # the rows of the learning-per-hour table that carried a verdict
  arith_row dyn trainer.dynamic_sampling.enabled=true
  arith_row g16 trainer.tasks_per_iteration=2 trainer.group_size=16
  arith_row ppo2 learner.ppo_epochs=2 learner.mini_batch_size=16
  arith_row t07 agent.sampling.temperature=0.7
}

frozenlake() {
  for s in $SEEDS; do
    claim "frozenlake/grpo_s$s" "$ROOT/frozenlake_grpo_s$s" recipe=grpo_gym_frozenlake seed="$s"
  done
}

for group in "${@:-demo positions arithmetic per_hour frozenlake}"; do
  for g in $group; do "$g"; done
done
