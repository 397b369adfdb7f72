"""Two or more training methods on the same held-out tasks, several seeds each: every run's evals with 95 % Wilson
intervals, each method's pooled paired verdicts (model as shipped -> eval, warm start -> eval, random floor ->
eval), the methods against each other at one eval (paired by seed and task), and held-out success against training
minutes with Wilson bands.

    python scripts/compare_methods.py --method gigpo runs/a_s0 runs/a_s1 --method grpo runs/b_s0 runs/b_s1 \
        [--at 20] [--baseline grpo] [--plot docs/img/x.png] [--out comparison.json]

List each method's runs in the same seed order: run i of one method is paired with run i of the other. `--at`
names the eval compared (an iteration; default: the last eval every run has), so runs of different lengths are
compared at the same budget. `--baseline` compares every other method with that one only (a table of settings
against the recipe) instead of every pair, and adds the learning-per-hour table: each method's pooled gain over its
warm start divided by its seeds' mean training hours (warm start, rollout, update, sync; evals not counted), the
interval scaled the same way. Reads summary.json's `eval_outcomes`, or, for a run stopped early, its newest
checkpoint's. Prints markdown tables and writes the JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agentforge.stats import paired_difference, wilson_interval
from agentforge.tracking.tracker import read_metrics

Outcomes = dict[str, list[bool]]


def eval_outcomes(run: Path) -> dict[str, Outcomes]:
    """summary.json's per-task outcomes of every eval, else the newest checkpoint's (a run stopped before the end)."""
    summary = run / "summary.json"
    if summary.is_file():
        found = json.loads(summary.read_text()).get("eval_outcomes") or {}
        if found:
            return found
    states = sorted(run.glob("checkpoints/iter_*/trainer_state.json"))
    if not states:
        raise SystemExit(f"{run}: no summary.json with eval_outcomes and no checkpoint: nothing to pair")
    return json.loads(states[-1].read_text())["eval_outcomes"]


def curve(run: Path) -> list[tuple[int, float, float, int]]:
    """(iteration, training minutes, held-out success, episodes) of each eval of the run."""
    points = []
    for row in read_metrics(run / "metrics.jsonl"):
        if "eval/success_rate" in row:
            minutes = float(row.get("time/train_elapsed", row.get("time/warm_start", 0.0))) / 60
            points.append((int(row["iteration"]), minutes, float(row["eval/success_rate"]),
                           int(row.get("eval/episodes", 0))))
    return points


def pooled(runs: list[Path], key: str) -> Outcomes:
    out: Outcomes = {}
    for run in runs:
        evals = eval_outcomes(run)
        if key not in evals:
            raise SystemExit(f"{run} has no eval {key!r}; it has {', '.join(evals)}")
        for task, outcomes in evals[key].items():
            out.setdefault(task, []).extend(outcomes)
    return out


def rate(outcomes: Outcomes) -> tuple[float, int]:
    flat = [o for values in outcomes.values() for o in values]
    return (sum(flat) / len(flat) if flat else float("nan")), len(flat)


def fmt(value: float, n: int) -> str:
    low, high = wilson_interval(value * n, n)
    return f"{value:.1%} [{low:.0%}, {high:.0%}]"


def floor_outcomes(run: Path) -> Outcomes | None:
    """The run's random floor (a uniformly random admissible action, the trainer's seed and turn budget) on its eval
    tasks, from the same cache the trainer fills; None where the env lists no admissible actions."""
    from omegaconf import OmegaConf

    from agentforge.evaluation.floor import NoFloor, random_floor
    from agentforge.tasks import held_out_tasks

    cfg = OmegaConf.to_container(OmegaConf.load(run / "config.yaml"), resolve=False)
    env = dict(cfg["env"])
    name = str(env.pop("name"))
    tasks = held_out_tasks(name, env, int(cfg["trainer"]["eval_tasks"]))
    try:
        return random_floor(name, env, tasks, int(cfg["agent"]["max_turns"]), int(cfg["trainer"]["eval_group_size"]),
                            int(cfg["seed"]))
    except NoFloor:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", nargs="+", action="append", required=True, metavar=("NAME", "RUN"),
                        help="a method's name, then its runs (seed order)")
    parser.add_argument("--at", default=None, help="the eval compared (an iteration); default: the last all share")
    parser.add_argument("--baseline", default=None,
                        help="compare each method with this one only, and print the learning-per-hour table")
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    methods = {spec[0]: [Path(p) for p in spec[1:]] for spec in args.method}
    if any(not runs for runs in methods.values()):
        raise SystemExit("each --method needs a name and at least one run")
    shared = set.intersection(*(set(eval_outcomes(run)) for runs in methods.values() for run in runs))
    at = args.at or str(max(int(k) for k in shared if k.isdigit()))
    report: dict[str, Any] = {"at": at, "methods": {}, "between": {}}

    print(f"| method | seed | shipped | warm start (0) | eval {at} | training minutes to {at} |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, runs in methods.items():
        for seed, run in enumerate(runs):
            evals = eval_outcomes(run)
            minutes = next((m for i, m, _, _ in curve(run) if str(i) == at), float("nan"))
            cells = [fmt(*rate(evals[k])) if k in evals else "-" for k in ("base", "0", at)]
            print(f"| {name} | {seed} | {' | '.join(cells)} | {minutes:.1f} |")
    print()
    print("| method (pooled over seeds) | comparison | paired difference [95 %] |")
    print("| --- | --- | --- |")
    for name, runs in methods.items():
        verdicts = {}
        after = pooled(runs, at)
        for label, key in (("model as shipped", "base"), ("warm start", "0")):
            if all(key in eval_outcomes(run) for run in runs):
                verdict = paired_difference(pooled(runs, key), after)
                verdicts[f"{label} -> {at}"] = verdict.to_json()
                print(f"| {name} | {label} → eval {at} | {verdict.describe()} |")
        floors = [floor_outcomes(run) for run in runs]
        if all(floors):
            floor: Outcomes = {}
            for found in floors:
                for task, outcomes in (found or {}).items():
                    floor.setdefault(task, []).extend(outcomes)
            verdict = paired_difference(floor, after)
            verdicts[f"random floor -> {at}"] = verdict.to_json()
            print(f"| {name} | random floor ({fmt(*rate(floor))}) → eval {at} | {verdict.describe()} |")
        report["methods"][name] = {"runs": [str(r) for r in runs], "verdicts": verdicts,
                                   "curves": {str(r): curve(r) for r in runs}}
    names = list(methods)
    if args.baseline is not None and args.baseline not in methods:
        raise SystemExit(f"--baseline {args.baseline}: no such method; the methods are {', '.join(names)}")
    pairs = [(name, args.baseline) for name in names if name != args.baseline] if args.baseline else \
        [(first, second) for i, first in enumerate(names) for second in names[i + 1:]]
    for first, second in pairs:
        if len(methods[first]) != len(methods[second]):
            raise SystemExit(f"{first} and {second} need the same number of runs (paired by seed)")
        verdict = paired_difference(pooled(methods[second], at), pooled(methods[first], at))
        report["between"][f"{second} -> {first}"] = verdict.to_json()
        print(f"| {first} vs {second} | {second} → {first} at eval {at} | {verdict.describe()} |")
    if args.baseline:
        report["per_hour"] = per_hour_table(methods, at, report, args.baseline)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
        print(f"-> {args.out}")
    if args.plot:
        plot(methods, args.plot)


def per_hour_table(methods: dict[str, list[Path]], at: str, report: dict[str, Any], baseline: str) -> dict[str, Any]:
    """Each method's pooled gain over its warm start at eval `at` per training hour (the seeds' mean), and its
    difference from the baseline at `at` (method minus baseline); printed as a markdown table."""
    print()
    print(f"| method | warm start → eval {at}, per seed | pooled paired: warm start → {at} | vs baseline at {at} "
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
        print(f"| {name} | {cells[0]} | {cells[1]} | {cells[2]} | {' / '.join(f'{m:.1f}' for m in minutes)} | "
              + (f"{per_hour[0]:+.0f} [{per_hour[1]:+.0f}, {per_hour[2]:+.0f}] |" if per_hour else "- |"))
        table[name] = row
    return table


def verdict_cell(verdict: dict[str, Any]) -> str:
    return (f"{100 * verdict['difference']:+.1f} [{100 * verdict['low']:+.1f}, {100 * verdict['high']:+.1f}], "
            f"{'beyond noise' if verdict['beyond_noise'] else 'within noise'}")


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
