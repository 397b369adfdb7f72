"""Summarise scripts/async_comparison.sh: held-out success of synchronous and asynchronous (k = 1) GRPO per seed with
95 % intervals, pooled over seeds, the training wall-clock (first iteration excluded: start-up) and its ratio, the
learner's wait and the staleness, and a plot (docs/img/async_comparison_sokoban.png).

Usage: python scripts/async_comparison.py runs/async_comparison [--plot docs/img/...png]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from objective_comparison import evals, fmt  # noqa: E402

from agentforge.tracking.tracker import read_metrics  # noqa: E402
from agentforge.training.summary import wilson_interval  # noqa: E402

VARIANTS = ("sync", "async1")
LABELS = {"sync": "synchronous (k = 0)", "async1": "asynchronous (k = 1)"}
EVAL_ITERATIONS = (0, 5, 10)


def train_rows(run: Path) -> list[dict]:
    return [r for r in read_metrics(run / "metrics.jsonl") if "time/iteration" in r]


def pooled_rate(values: list[tuple[float, int]]) -> tuple[float, int]:
    n = sum(e for _, e in values)
    return (sum(r * e for r, e in values) / n if n else float("nan")), n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--plot", type=Path, default=Path("docs/img/async_comparison_sokoban.png"))
    args = parser.parse_args()
    runs = {(v, s): args.out / f"{v}-seed{s}" for v in VARIANTS for s in (0, 1)}
    runs = {k: p for k, p in runs.items() if (p / "metrics.jsonl").is_file()}
    table = ["| mode | seed | success it 0 | it 5 | it 10 | train success | training s (its 2-10) | s/iteration | "
             "learner wait s/it | staleness mean |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    pooled: dict[str, dict[int, list[tuple[float, int]]]] = {}
    wall: dict[str, list[float]] = {}
    curves: dict[tuple[str, int], list[float]] = {}
    for (variant, seed), run in sorted(runs.items()):
        found = evals(run)
        rows = train_rows(run)
        timed = rows[1:]
        seconds = sum(r["time/iteration"] for r in timed)
        wall.setdefault(variant, []).append(seconds)
        curves[(variant, seed)] = list(np.cumsum([r["time/iteration"] for r in rows]))
        train = [r["train/success_rate"] for r in rows if "train/success_rate" in r]
        wait = [r.get("async/learner_wait_s", r["time/rollout"]) for r in timed]
        stale = [r.get("async/staleness_mean", 0.0) for r in rows]
        cells = [fmt(*found[i]) if i in found else "-" for i in EVAL_ITERATIONS]
        table.append(f"| {LABELS[variant]} | {seed} | {' | '.join(cells)} | {np.mean(train):.3f} | {seconds:.0f} | "
                     f"{np.mean([r['time/iteration'] for r in timed]):.1f} | {np.mean(wait):.1f} | "
                     f"{np.mean(stale):.2f} |")
        for i, value in found.items():
            pooled.setdefault(variant, {}).setdefault(i, []).append(value)
    table += ["", "| mode | pooled success it 0 | it 5 | it 10 | training s (sum of seeds) |",
              "| --- | --- | --- | --- | --- |"]
    for variant in VARIANTS:
        if variant not in pooled:
            continue
        cells = [fmt(*pooled_rate(pooled[variant][i])) if i in pooled[variant] else "-" for i in EVAL_ITERATIONS]
        table.append(f"| {LABELS[variant]} | {' | '.join(cells)} | {sum(wall[variant]):.0f} |")
    if "sync" in wall and "async1" in wall:
        ratio = sum(wall["sync"]) / sum(wall["async1"])
        table += ["", f"Training wall-clock, synchronous / asynchronous: **{ratio:.2f}x**"]
    print("\n".join(table))
    (args.out / "table.md").write_text("\n".join(table) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for k, variant in enumerate(v for v in VARIANTS if v in pooled):
        its = sorted(pooled[variant])
        rates, lows, highs = [], [], []
        for i in its:
            rate, n = pooled_rate(pooled[variant][i])
            lo, hi = wilson_interval(rate * n, n)
            rates.append(rate)
            lows.append(rate - lo)
            highs.append(hi - rate)
        left.errorbar(np.asarray(its) + (k - 0.5) * 0.2, rates, yerr=[lows, highs], marker="o", capsize=3,
                      label=LABELS[variant])
    left.set_xlabel("update")
    left.set_ylabel("held-out success (2 seeds x 64 rooms, 95 % Wilson)")
    left.set_xticks(list(EVAL_ITERATIONS))
    left.legend(fontsize=8)
    for (variant, seed), curve in sorted(curves.items()):
        right.plot(range(1, len(curve) + 1), curve, marker=".", linestyle="-" if variant == "sync" else "--",
                   label=f"{LABELS[variant]}, seed {seed}")
    right.set_xlabel("update")
    right.set_ylabel("training seconds (cumulative, evals excluded)")
    right.legend(fontsize=8)
    fig.suptitle("GRPO on 6x6 Sokoban, SmolLM2-135M, shared SFT warm start: synchronous vs asynchronous")
    fig.tight_layout()
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=120)
    print(json.dumps({"plot": str(args.plot), "table": str(args.out / "table.md")}))


if __name__ == "__main__":
    main()
