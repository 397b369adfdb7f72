"""Verdicts over several training seeds from each run's per-task eval outcomes (summary.json `eval_outcomes`):
between two evals of each run, or, with `--against`, between two sets of runs (two methods or settings trained with
the same seeds, same held-out tasks).

    python scripts/pooled_verdict.py RUN [RUN ...] [--before 0] [--after last] [--out verdict.json]
    python scripts/pooled_verdict.py GIGPO_S0 GIGPO_S1 GIGPO_S2 --against GRPO_S0 GRPO_S1 GRPO_S2 [--after last]

`--before` / `--after` name evals as summary.json keys them: `base` (the model as given), `0` (after the warm
start), an iteration number, or `last` (each run's final eval). With `--against`, run i is paired with against-run i
(same seed: list them in the same order) and each side's `--after` eval is compared: the difference is RUNs minus
AGAINST. Prints each pair's own verdict (paired task by task, agentforge.stats.paired_difference) and the verdict
over seeds, and writes them as JSON.

Over seeds (agentforge.stats.seed_difference): each seed's difference, then their mean, with an interval that
includes run-to-run variance and no verdict with fewer than 3 seeds. A method against another is a claim about
training, and two runs of one method differ by more than their eval noise, so this is the only verdict `--against`
gives (pooling the seeds' outcomes per task left run-to-run variance out: "beyond noise" that flipped sign between
iterations). Between two evals of each run (no `--against`), the gain is also pooled task by task (a task's runs as
its episodes, paired task bootstrap): the eval noise of the gain these runs made, not a claim about another run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentforge.evaluation.run_outcomes import run_outcomes
from agentforge.stats import paired_difference, seed_difference

Outcomes = dict[str, list[bool]]


SPLIT = {"name": "test"}  # --split: the held-out split read (test: claims; eval: choosing settings)


def outcomes(run: Path) -> dict[str, Outcomes]:
    return run_outcomes(run, SPLIT["name"])


def pick(evals: dict[str, Outcomes], key: str, run: Path) -> Outcomes:
    if key == "last":
        key = max((k for k in evals if k.isdigit()), key=int)
    if key not in evals:
        raise SystemExit(f"{run} has no eval {key!r}; it has {', '.join(evals)}")
    return evals[key]


def pool(into: Outcomes, outcomes_: Outcomes, tasks: set[str]) -> None:
    for task in tasks:
        into.setdefault(task, []).extend(outcomes_[task])


def pairs_of(args: argparse.Namespace) -> list[tuple[Path, str, Outcomes, Outcomes]]:
    """(run, label, before, after) per run: its own two evals, or against-run i's eval and run i's."""
    if not args.against:
        found = []
        for run in args.runs:
            evals = outcomes(run)
            found.append((run, f"{run}: {args.before} → {args.after}", pick(evals, args.before, run),
                          pick(evals, args.after, run)))
        return found
    if len(args.against) != len(args.runs):
        raise SystemExit(f"--against needs one run per run compared (paired by seed, in order): got "
                         f"{len(args.runs)} runs and {len(args.against)} against")
    return [(run, f"{base} → {run} (eval {args.after})", pick(outcomes(base), args.after, base),
             pick(outcomes(run), args.after, run)) for run, base in zip(args.runs, args.against, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--before", default="0")
    parser.add_argument("--after", default="last")
    parser.add_argument("--against", nargs="+", type=Path, default=None,
                        help="runs of the method compared with (same seeds, same order): RUNs minus these")
    parser.add_argument("--split", default="test", choices=("test", "eval"),
                        help="the held-out split: test (claims; default) or eval")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    SPLIT["name"] = args.split

    pooled_before: Outcomes = {}
    pooled_after: Outcomes = {}
    per_run, befores, afters = {}, [], []
    for run, label, before, after in pairs_of(args):
        verdict = paired_difference(before, after)
        per_run[str(run)] = verdict.to_json()
        print(f"{label}: {verdict.describe()}")
        shared = set(before) & set(after)
        pool(pooled_before, before, shared)
        pool(pooled_after, after, shared)
        befores.append(before)
        afters.append(after)
    what = (f"{', '.join(map(str, args.against))} → {', '.join(map(str, args.runs))} (eval {args.after})"
            if args.against else f"{args.before} → {args.after}")
    pooled = None
    if not args.against:
        pooled = paired_difference(pooled_before, pooled_after)
        print(f"pooled over {len(args.runs)} runs task by task (eval noise only): {what}: {pooled.describe()}")
    over_seeds = seed_difference(befores, afters)
    print(f"over {over_seeds.seeds} training seeds: {what}: {over_seeds.describe()}")
    report = {"before": args.before, "after": args.after, "runs": per_run,
              "pooled": pooled.to_json() if pooled else None, "over_seeds": over_seeds.to_json(),
              "against": [str(p) for p in args.against] if args.against else None}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
        print(f"-> {args.out}")


if __name__ == "__main__":
    main()
