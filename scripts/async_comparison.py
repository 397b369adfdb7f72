"""Summarise scripts/async_comparison.sh: held-out success of synchronous and asynchronous (k = 1) GRPO per seed with
95 % intervals, pooled over seeds, the training wall-clock (first iteration excluded: start-up) and its ratio, the
learner's wait and the staleness, and a plot (docs/img/async_comparison_sokoban.png).

Usage: python scripts/async_comparison.py runs/async_comparison [--plot docs/img/...png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from seed_comparison import (
    evals,
    fmt,
    plot_pooled,
    pool,
    pooled_cells,
    save_plot,
    variant_runs,
    write_table,
)

from agentforge.tracking.tracker import read_metrics

VARIANTS = ("sync", "async1")
LABELS = {"sync": "synchronous (k = 0)", "async1": "asynchronous (k = 1)"}
EVAL_ITERATIONS = (0, 5, 10)


def train_rows(run: Path) -> list[dict]:
    return [r for r in read_metrics(run / "metrics.jsonl") if "time/iteration" in r]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--plot", type=Path, default=Path("docs/img/async_comparison_sokoban.png"))
    args = parser.parse_args()
    table = ["| mode | seed | success it 0 | it 5 | it 10 | train success | training s (its 2-10) | s/iteration | "
             "learner wait s/it | staleness mean |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    pooled: dict[str, dict[int, list[tuple[float, int]]]] = {}
    wall: dict[str, list[float]] = {}
    curves: dict[tuple[str, int], list[float]] = {}
    for (variant, seed), run in sorted(variant_runs(args.out, VARIANTS).items()):
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
        pool(pooled, variant, found)
    table += ["", "| mode | pooled success it 0 | it 5 | it 10 | training s (sum of seeds) |",
              "| --- | --- | --- | --- | --- |"]
    for variant in VARIANTS:
        if variant not in pooled:
            continue
        cells = pooled_cells(pooled, variant, EVAL_ITERATIONS)
        table.append(f"| {LABELS[variant]} | {' | '.join(cells)} | {sum(wall[variant]):.0f} |")
    if "sync" in wall and "async1" in wall:
        ratio = sum(wall["sync"]) / sum(wall["async1"])
        table += ["", f"Training wall-clock, synchronous / asynchronous: **{ratio:.2f}x**"]
    write_table(args.out, table)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    plot_pooled(left, pooled, VARIANTS, LABELS, step=0.2)
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
    save_plot(fig, args.plot, args.out)


if __name__ == "__main__":
    main()
