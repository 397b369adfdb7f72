"""Time-to-success: a fixed short training schedule, its held-out success per training hour, and where the time went.

    python benchmarks/time_to_success.py [--recipe R] [--dtype auto] [--run-dir DIR] [--tag T] [overrides ...]

Runs `agentforge train recipe=<recipe>` in a fresh process, then reads the run's metrics.jsonl and summary.json:
the seconds of each phase (warm start, rollout, learner update, weight sync, eval, the rest: start-up, checkpoints,
plots), held-out success of the model as given, after the warm start and at the end (95 % Wilson intervals), the
paired verdicts (agentforge/stats.py: same tasks, same sampling seeds) and the gain in success per hour
of training time (rollout + update + sync + warm start; evals not counted), with the paired interval scaled the
same way.
Writes benchmarks/results/time_to_success_<recipe>_<dtype>.json and prints one line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import metric_rows, publish, run_child

PHASES = ("time/warm_start", "time/rollout", "time/update", "time/sync", "time/eval", "time/base_eval", "time/test",
          "time/test_base")


def phase_seconds(rows: list[dict]) -> dict[str, float]:
    """Each phase's seconds summed over the run's logged rows (an eval's time is logged with its row)."""
    totals = {key: 0.0 for key in PHASES}
    for row in rows:
        for key in PHASES:
            if isinstance(row.get(key), int | float):
                totals[key] += float(row[key])
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="sokoban_demo")
    parser.add_argument("--dtype", default="auto", help="model.dtype: auto | float32 | bfloat16")
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="where the run goes (default: a temp dir); kept, with its curves and trajectories")
    parser.add_argument("--tag", default="", help="appended to the result's name (e.g. seed0) so runs do not overwrite")
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides")
    args = parser.parse_args()

    from agentforge.hardware import describe, resolve_dtype

    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="agentforge-tts-")) / "run"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = run_dir.parent / f"{run_dir.name}.log"
    command = [sys.executable, "-m", "agentforge.cli", "train", f"recipe={args.recipe}", f"model.dtype={args.dtype}",
               "logger.wandb=false", f"hydra.run.dir={run_dir}", *args.overrides]
    started = time.perf_counter()
    with log.open("w") as out:
        code = run_child(command, stdout=out, stderr=subprocess.STDOUT)  # a SIGTERM here stops the run too
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"the run failed (exit {code}); log: {log}\n{log.read_text()[-3000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary = summary.get("test") or summary  # the claim's split (test) where the run has one, else the eval split
    rows = metric_rows(run_dir)
    phases = phase_seconds(rows)
    phases["other (start-up, checkpoints, plots)"] = max(0.0, wall - sum(phases.values()))
    train_hours = (phases["time/warm_start"] + phases["time/rollout"] + phases["time/update"]
                   + phases["time/sync"]) / 3600
    verdicts = summary.get("verdicts", [])
    gain = next((v for v in verdicts if v["from"] == "model as given"), verdicts[0] if verdicts else None)
    per_hour = None
    if gain and train_hours > 0:
        per_hour = {"vs": gain["from"], "difference_per_hour": gain["difference"] / train_hours,
                    "low_per_hour": gain["low"] / train_hours, "high_per_hour": gain["high"] / train_hours,
                    "beyond_noise": gain["beyond_noise"]}
    dtype = resolve_dtype(args.dtype)[0]
    report = {"command": command, "hardware": describe(dtype), "wall_seconds": wall, "phase_seconds": phases,
              "training_hours": train_hours, "evals": summary.get("evals", []), "verdicts": verdicts,
              "success_gain_per_training_hour": per_hour, "log": str(log), "run_dir": str(run_dir)}
    split = ", ".join(f"{k.removeprefix('time/')} {v / 60:.1f}" for k, v in phases.items())
    headline = (f"{per_hour['difference_per_hour']:+.1%}/h [{per_hour['low_per_hour']:+.1%}, "
                f"{per_hour['high_per_hour']:+.1%}] vs {per_hour['vs']}") if per_hour else "no paired verdict"
    name = f"time_to_success_{args.recipe}_{dtype}" + (f"_{args.tag}" if args.tag else "")
    publish(name, report,
            f"time_to_success {args.recipe} {dtype} [{report['hardware']['cpu_kind']}]: {wall / 60:.1f} min wall, "
            f"{train_hours * 60:.1f} min training | success {headline} | minutes: {split}")


if __name__ == "__main__":
    main()
