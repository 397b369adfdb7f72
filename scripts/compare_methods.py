"""Two or more training methods on the same held-out tasks, several seeds each: every run's evals with 95 % Wilson
intervals, each method's paired gains (model as shipped -> eval, warm start -> eval, random floor -> eval; pooled
over its seeds task by task, and seed by seed), the methods against each other at one eval over training seeds
(agentforge.stats.seed_difference), and held-out success against training minutes with Wilson bands.

    python scripts/compare_methods.py --method gigpo runs/a_s0 runs/a_s1 --method grpo runs/b_s0 runs/b_s1 \
        [--at 20] [--baseline grpo] [--plot docs/img/x.png] [--out comparison.json]

List each method's runs in the same seed order: run i of one method is paired with run i of the other. `--at`
names the eval compared (an iteration; default: the last eval every run has), so runs of different lengths are
compared at the same budget. `--baseline` compares every other method with that one only (a table of settings
against the recipe) instead of every pair, and adds the learning-per-hour table: each method's pooled gain over its
warm start divided by its seeds' mean training hours (warm start, rollout, update, sync; evals not counted), the
interval scaled the same way. Reads each run's test-split outcomes (`--split eval`: the eval split's) from
summary.json, or, for a run stopped early, its newest checkpoint's. Prints markdown tables and writes the JSON.

Why two kinds of verdict: a gain over the warm start or the floor is paired within each run (same tasks, same
sampling seeds), so pooling a method's seeds task by task measures eval noise well; it is also given seed by seed.
A method against another is a claim about training, and two runs of one method differ by more than their eval noise,
so the seed is the unit there: run i against run i, an interval that includes run-to-run variance, and no verdict
with fewer than 3 seeds (pooling the seeds per task left that variance out and called coin flips "beyond noise").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agentforge.evaluation.run_outcomes import run_floor, run_outcomes
from agentforge.stats import SEED_METHOD, PairedDifference, paired_difference, seed_difference, wilson_interval
from agentforge.tracking.tracker import read_metrics

Outcomes = dict[str, list[bool]]


SPLIT = {"name": "test"}  # the held-out split compared (--split): test (claims) or eval (choosing settings)


def eval_outcomes(run: Path) -> dict[str, Outcomes]:
    """The run's per-task outcomes of every eval of the compared split (agentforge/evaluation/run_outcomes.py)."""
    return run_outcomes(run, SPLIT["name"])


def curve(run: Path) -> list[tuple[int, float, float, int]]:
    """(iteration, training minutes, held-out success, episodes) of each eval of the run."""
    points = []
    split = SPLIT["name"]
    for row in read_metrics(run / "metrics.jsonl"):
        if f"{split}/success_rate" in row:
            minutes = float(row.get("time/train_elapsed", row.get("time/warm_start", 0.0))) / 60
            points.append((int(row["iteration"]), minutes, float(row[f"{split}/success_rate"]),
                           int(row.get(f"{split}/episodes", 0))))
    return points


def at_eval(runs: list[Path], key: str) -> list[Outcomes]:
    """Each run's outcomes at eval `key`, in seed order (what seed_difference pairs)."""
    found = []
    for run in runs:
        evals = eval_outcomes(run)
        if key not in evals:
            raise SystemExit(f"{run} has no eval {key!r}; it has {', '.join(evals)}")
        found.append(evals[key])
    return found


def per_seed_cell(verdicts: list[PairedDifference]) -> str:
    """Each seed's paired difference (points [95 %]), in seed order."""
    return " / ".join(f"{100 * v.difference:+.1f} [{100 * v.low:+.1f}, {100 * v.high:+.1f}]" for v in verdicts)


def rate(outcomes: Outcomes) -> tuple[float, int]:
    flat = [o for values in outcomes.values() for o in values]
    return (sum(flat) / len(flat) if flat else float("nan")), len(flat)


def fmt(value: float, n: int) -> str:
    low, high = wilson_interval(value * n, n)
    return f"{value:.1%} [{low:.0%}, {high:.0%}]"


def floor_outcomes(run: Path) -> Outcomes | None:
    """The run's random floor on the compared split's tasks, as its summary recorded it (None: none recorded)."""
    return run_floor(run, SPLIT["name"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", nargs="+", action="append", required=True, metavar=("NAME", "RUN"),
                        help="a method's name, then its runs (seed order)")
    parser.add_argument("--at", default=None, help="the eval compared (an iteration); default: the last all share")
    parser.add_argument("--baseline", default=None,
                        help="compare each method with this one only, and print the learning-per-hour table")
    parser.add_argument("--split", default="test", choices=("test", "eval"),
                        help="the held-out split compared: test (claims; default) or eval (choosing settings)")
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    SPLIT["name"] = args.split
    methods = {spec[0]: [Path(p) for p in spec[1:]] for spec in args.method}
    if any(not runs for runs in methods.values()):
        raise SystemExit("each --method needs a name and at least one run")
    shared = set.intersection(*(set(eval_outcomes(run)) for runs in methods.values() for run in runs))
    at = args.at or str(max(int(k) for k in shared if k.isdigit()))
    report: dict[str, Any] = {"at": at, "split": args.split, "methods": {}, "between": {}}

    print(f"| method | seed | shipped | warm start (0) | eval {at} | training minutes to {at} |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, runs in methods.items():
        for seed, run in enumerate(runs):
            evals = eval_outcomes(run)
            minutes = next((m for i, m, _, _ in curve(run) if str(i) == at), float("nan"))
            cells = [fmt(*rate(evals[k])) if k in evals else "-" for k in ("base", "0", at)]
            print(f"| {name} | {seed} | {' | '.join(cells)} | {minutes:.1f} |")
    print()
    print("| method (training seeds) | comparison | pooled over the seeds, task by task (eval noise only) "
          "| per seed, paired within the run [95 %] |")
    print("| --- | --- | --- | --- |")
    for name, runs in methods.items():
        report["methods"][name] = {"runs": [str(r) for r in runs], **gains(name, runs, at),
                                   "curves": {str(r): curve(r) for r in runs}}
    names = list(methods)
    if args.baseline is not None and args.baseline not in methods:
        raise SystemExit(f"--baseline {args.baseline}: no such method; the methods are {', '.join(names)}")
    pairs = [(name, args.baseline) for name in names if name != args.baseline] if args.baseline else \
        [(first, second) for i, first in enumerate(names) for second in names[i + 1:]]
    if pairs:
        print()
        print(f"| methods (training seeds) | comparison, run i with run i | difference over seeds [95 %] "
              f"({SEED_METHOD}; no verdict under 3 seeds) |")
        print("| --- | --- | --- |")
    for first, second in pairs:
        if len(methods[first]) != len(methods[second]):
            raise SystemExit(f"{first} and {second} need the same number of runs (paired by seed)")
        verdict = seed_difference(at_eval(methods[second], at), at_eval(methods[first], at))
        report["between"][f"{second} -> {first}"] = verdict.to_json()
        print(f"| {first} vs {second} ({verdict.seeds} seeds) | {second} → {first} at eval {at} "
              f"| {verdict.describe()} |")
    if args.baseline:
        report["per_hour"] = per_hour_table(methods, at, report, args.baseline)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
        print(f"-> {args.out}")
    if args.plot:
        plot(methods, args.plot)


def gains(name: str, runs: list[Path], at: str) -> dict[str, Any]:
    """A method's paired gains at eval `at` (from the model as shipped, the warm start, the random floor): pooled
    over its seeds task by task, and each seed's own; printed as rows of the gains table."""
    pooled_verdicts, per_seed = {}, {}
    after = at_eval(runs, at)
    befores = [(label, at_eval(runs, key)) for label, key in (("model as shipped", "base"), ("warm start", "0"))
               if all(key in eval_outcomes(run) for run in runs)]
    floors = [floor_outcomes(run) for run in runs]
    if all(floors):
        befores.append(("random floor", [found or {} for found in floors]))
    for label, before in befores:
        verdict = paired_difference(pool(before), pool(after))
        seeds = [paired_difference(b, a) for b, a in zip(before, after, strict=True)]
        pooled_verdicts[f"{label} -> {at}"] = verdict.to_json()
        per_seed[f"{label} -> {at}"] = [v.to_json() for v in seeds]
        shown = f"random floor ({fmt(*rate(pool(before)))})" if label == "random floor" else label
        print(f"| {name} ({len(runs)} seeds) | {shown} → eval {at} | {verdict.describe()} | {per_seed_cell(seeds)} |")
    return {"verdicts": pooled_verdicts, "verdicts_per_seed": per_seed}


def pool(per_run: list[Outcomes]) -> Outcomes:
    """The runs' outcomes task by task: each task's runs as its episodes."""
    out: Outcomes = {}
    for outcomes in per_run:
        for task, values in outcomes.items():
            out.setdefault(task, []).extend(values)
    return out


def per_hour_table(methods: dict[str, list[Path]], at: str, report: dict[str, Any], baseline: str) -> dict[str, Any]:
    """Each method's pooled gain over its warm start at eval `at` per training hour (the seeds' mean), and its
    difference from the baseline at `at` over training seeds (method minus baseline); printed as a markdown table."""
    print()
    print(f"| method (training seeds) | warm start → eval {at}, per seed | warm start → {at}, pooled over the seeds "
          f"(eval noise only) | vs baseline at {at}, over training seeds ({SEED_METHOD}) "
          f"| training minutes to {at}, per seed | points over the warm start per training hour [95 %] |")
    print("| --- | --- | --- | --- | --- | --- |")
    table = {}
    for name, runs in methods.items():
        seeds, minutes = [], []
        for run in runs:
            evals = eval_outcomes(run)
            seeds.append(f"{rate(evals['0'])[0]:.1%} → {rate(evals[at])[0]:.1%}")
            minutes.append(next((m for i, m, _, _ in curve(run) if str(i) == at), float("nan")))
        gain = report["methods"][name]["verdicts"].get(f"warm start -> {at}")
        versus = report["between"].get(f"{baseline} -> {name}")
        hours = sum(minutes) / len(minutes) / 60
        row = {"seeds": seeds, "training_minutes": minutes, "gain": gain, "versus_baseline": versus,
               "points_per_hour": None}
        cells = [" / ".join(seeds), "-", "(baseline)" if versus is None else verdict_cell(versus)]
        if gain:
            cells[1] = verdict_cell(gain)
            if hours > 0:
                row["points_per_hour"] = [100 * gain[k] / hours for k in ("difference", "low", "high")]
        per_hour = row["points_per_hour"]
        print(f"| {name} ({len(runs)} seeds) | {cells[0]} | {cells[1]} | {cells[2]} "
              f"| {' / '.join(f'{m:.1f}' for m in minutes)} | "
              + (f"{per_hour[0]:+.0f} [{per_hour[1]:+.0f}, {per_hour[2]:+.0f}] |" if per_hour else "- |"))
        table[name] = row
    return table


def verdict_cell(verdict: dict[str, Any]) -> str:
    """Points [95 %] and the verdict's direction (a seed comparison under 3 seeds says it gives none)."""
    return (f"{100 * verdict['difference']:+.1f} [{100 * verdict['low']:+.1f}, {100 * verdict['high']:+.1f}], "
            f"{verdict['direction']}")


def plot(methods: dict[str, list[Path]], path: Path) -> None:
    """Pooled held-out success per eval against the seeds' mean training minutes, 95 % Wilson bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, runs in methods.items():
        by_iteration: dict[int, list[tuple[float, float, int]]] = {}
        for run in runs:
            for iteration, minutes, success, n in curve(run):
                by_iteration.setdefault(iteration, []).append((minutes, success, n))
        xs, ys, lows, highs = [], [], [], []
        for iteration in sorted(by_iteration):
            points = by_iteration[iteration]
            if len(points) != len(runs):
                continue  # an eval not every seed reached
            n = sum(p[2] for p in points)
            value = sum(p[1] * p[2] for p in points) / n
            low, high = wilson_interval(value * n, n)
            xs.append(sum(p[0] for p in points) / len(points))
            ys.append(value)
            lows.append(low)
            highs.append(high)
        (line,) = ax.plot(xs, ys, marker="o", label=f"{name} ({len(runs)} seeds)")
        ax.fill_between(xs, lows, highs, alpha=0.2, color=line.get_color())
    ax.set_xlabel("training minutes (warm start, rollout, update, sync; evals not counted)")
    ax.set_ylabel("held-out success, pooled (95 % Wilson)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
