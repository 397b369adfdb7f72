"""One paired verdict over several training seeds: each run's per-task eval outcomes (summary.json `eval_outcomes`),
pooled task by task, then compared between two of its evals with agentforge.evaluation.stats.paired_difference.

    python scripts/pooled_verdict.py RUN [RUN ...] [--before 0] [--after last] [--out verdict.json]

Why pool this way: the runs play the same held-out tasks, so a task's outcomes across seeds are its episodes; the
task stays the unit (paired task bootstrap), and a seed that happened to look good on an easy subset cannot carry
the result alone. `--before` / `--after` name evals as summary.json keys them: `base` (the model as given), `0`
(after the warm start), an iteration number, or `last` (each run's final eval). Prints each run's own verdict and
the pooled one, and writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentforge.evaluation.stats import paired_difference


def outcomes(run: Path) -> dict[str, dict[str, list[bool]]]:
    summary = json.loads((run / "summary.json").read_text())
    found = summary.get("eval_outcomes") or {}
    if not found:
        raise SystemExit(f"{run}/summary.json has no eval_outcomes: a run from before the paired evals; rerun it")
    return found


def pick(evals: dict[str, dict[str, list[bool]]], key: str, run: Path) -> dict[str, list[bool]]:
    if key == "last":
        key = max((k for k in evals if k.isdigit()), key=int)
    if key not in evals:
        raise SystemExit(f"{run} has no eval {key!r}; it has {', '.join(evals)}")
    return evals[key]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--before", default="0")
    parser.add_argument("--after", default="last")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    pooled_before: dict[str, list[bool]] = {}
    pooled_after: dict[str, list[bool]] = {}
    per_run = {}
    for run in args.runs:
        evals = outcomes(run)
        before, after = pick(evals, args.before, run), pick(evals, args.after, run)
        verdict = paired_difference(before, after)
        per_run[str(run)] = verdict.to_json()
        print(f"{run}: {args.before} → {args.after}: {verdict.describe()}")
        for task in set(before) & set(after):
            pooled_before.setdefault(task, []).extend(before[task])
            pooled_after.setdefault(task, []).extend(after[task])
    pooled = paired_difference(pooled_before, pooled_after)
    print(f"pooled over {len(args.runs)} runs: {args.before} → {args.after}: {pooled.describe()}")
    report = {"before": args.before, "after": args.after, "runs": per_run, "pooled": pooled.to_json()}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
        print(f"-> {args.out}")


if __name__ == "__main__":
    main()
