#!/usr/bin/env bash
# Evidence for the env-library adapters (docs/environments.md, "Evidence"): trains each adapter recipe on CPU and
# records held-out success before (iteration 0, trainer.eval_before) and after (the last eval) from its metrics.
#   bash scripts/adapter_evidence.sh [out dir]           the real runs: SmolLM2-135M, each recipe's budget (hours)
#   SMOKE=1 bash scripts/adapter_evidence.sh [out dir]   the tiny model, 1 iteration, 2 eval tasks (minutes): checks
#                                                        that every recipe runs end to end, proves nothing learned
#   RECIPES="grpo_gem_guess_the_number" ...              a subset
# Sequential (one heavy job at a time). Prints the markdown table rows for docs/environments.md and writes them to
# <out dir>/evidence.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/adapter_evidence}
PY=${PYTHON:-.venv/bin/python}
RECIPES=${RECIPES:-"grpo_gym_frozenlake tjpo_gym_frozenlake t2po_gym_frozenlake grpo_gem_guess_the_number grpo_textarena_guess_the_number grpo_reasoning_gym_arithmetic grpo_verifiers_guess_number"}
EXTRA=()
if [ "${SMOKE:-0}" = 1 ]; then
  OUT="$OUT/smoke"
  EXTRA=(model=tiny trainer.iterations=1 trainer.eval_tasks=2 trainer.eval_group_size=1 trainer.eval_every=1
         trainer.tasks_per_iteration=2 trainer.group_size=2 trainer.checkpoint_every=0 agent.sampling.max_new_tokens=16
         sft.num_tasks=4 sft.epochs=1 sft.batch_size=4 rft.num_tasks=2 rft.group_size=2
         rft.threshold=0.0 rft.require_valid=false)  # the tiny model wins nothing: RFT keeps all (plumbing only)
fi
mkdir -p "$OUT"
for recipe in $RECIPES; do
  dir="$OUT/$recipe"
  [ -f "$dir/summary.json" ] && continue
  echo "== $recipe -> $dir"
  start=$(date +%s)
  "$PY" -m agentforge.cli train "recipe=$recipe" logger.wandb=false "hydra.run.dir=$dir" "${EXTRA[@]}" \
    > "$OUT/$recipe.log" 2>&1 || { echo "$recipe failed: see $OUT/$recipe.log"; tail -5 "$OUT/$recipe.log"; continue; }
  echo "$(( $(date +%s) - start ))" > "$dir/wall_seconds"
done
"$PY" - "$OUT" $RECIPES <<'PY'
import json, sys
from pathlib import Path

out, recipes = Path(sys.argv[1]), sys.argv[2:]
def verdicts(run: Path) -> dict[str, str]:
    """summary.json's paired verdicts (agentforge/stats.py: same held-out tasks and sampling seeds), as table cells."""
    summary = run / "summary.json"
    found = {}
    for v in (json.loads(summary.read_text()).get("verdicts") or []) if summary.is_file() else []:
        if v.get("metric", "success") != "success":
            continue
        start = str(v.get("from", ""))
        # iteration 0 is the warm start where the run has one ("iteration 0 (after the warm start)"), else the model
        key = ("warm" if "warm start" in start else "given") if start.startswith("iteration 0") else \
            "given" if start == "model as given" else None
        if key:
            found[key] = (f"{v['difference']:+.1%} [{v['low']:+.1%}, {v['high']:+.1%}], "
                          f"{'beyond noise' if v['beyond_noise'] else 'within noise'} ({v['method']})")
    return found


rows = []
for recipe in recipes:
    run = out / recipe
    evals, base = [], None
    metrics = run / "metrics.jsonl"
    for line in (metrics.read_text().splitlines() if metrics.is_file() else []):
        row = json.loads(line)
        if "base/success_rate" in row:  # the model as given, before a warm start
            base = (float(row["base/success_rate"]), int(row.get("base/episodes", 0)))
        if "eval/success_rate" in row:
            evals.append((int(row["iteration"]), float(row["eval/success_rate"]), int(row.get("eval/episodes", 0))))
    if not evals:
        rows.append(f"| {recipe} | not run yet | | | | | | `RECIPES={recipe} bash scripts/adapter_evidence.sh` |")
        continue
    (i0, s0, n0), (i1, s1, n1) = evals[0], evals[-1]
    given = f"{base[0]:.1%} ({base[1]} ep.)" if base else f"{s0:.1%} ({n0} ep.)"
    warm = f"{s0:.1%} ({n0} ep.)" if base else "(no warm start)"
    wall = (run / "wall_seconds").read_text().strip() if (run / "wall_seconds").is_file() else "?"
    paired = verdicts(run)
    rows.append(f"| {recipe} | {given} | {warm} | {s1:.1%} (it {i1}, {n1} ep.) "
                f"| {paired.get('warm', '')} | {paired.get('given', '')} | {wall} s | `{run}` |")
table = "\n".join(["| recipe | held-out success: model as given | after the warm start | after training "
                   "| paired: warm start -> end | paired: model as given -> end | wall time | run |",
                   "| --- | --- | --- | --- | --- | --- | --- | --- |", *rows])
(out / "evidence.md").write_text(table + "\n")
print(table)
PY
