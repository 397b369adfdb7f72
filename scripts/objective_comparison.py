"""Summarise scripts/objective_comparison.sh: held-out success per objective and seed with 95 % intervals, pooled
over seeds, seconds per iteration, and a plot (docs/img/objective_comparison_sokoban.png).

Usage: python scripts/objective_comparison.py runs/objective_comparison [--plot docs/img/...png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from seed_comparison import evals, fmt, plot_pooled, pool, pooled_cells, save_plot, variant_runs, write_table

from agentforge.tracking.tracker import read_metrics

VARIANTS = ("vanilla", "dr_grpo", "gspo", "ppo_epochs2")
LABELS = {"vanilla": "today (PPO clip, token-mean)", "dr_grpo": "Dr. GRPO", "gspo": "GSPO",
          "ppo_epochs2": "ppo_epochs=2"}


def seconds_per_iteration(run: Path) -> float:
    times = [r["time/iteration"] for r in read_metrics(run / "metrics.jsonl") if "time/iteration" in r]
    return float(np.mean(times)) if times else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--plot", type=Path, default=Path("docs/img/objective_comparison_sokoban.png"))
    args = parser.parse_args()
    table = ["| objective | seed | success it 0 | it 5 | it 10 | train success (all its) | s/iteration |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    pooled: dict[str, dict[int, list[tuple[float, int]]]] = {}
    for (variant, seed), run in sorted(variant_runs(args.out, VARIANTS).items()):
        found = evals(run)
        rows = read_metrics(run / "metrics.jsonl")
        train = [r["train/success_rate"] for r in rows if "train/success_rate" in r]
        cells = [fmt(*found[i]) if i in found else "-" for i in (0, 5, 10)]
        table.append(f"| {LABELS[variant]} | {seed} | {' | '.join(cells)} | {np.mean(train):.3f} | "
                     f"{seconds_per_iteration(run):.0f} |")
        pool(pooled, variant, found)
    table += ["", "| objective | pooled success it 0 | it 5 | it 10 |", "| --- | --- | --- | --- |"]
    for variant in (v for v in VARIANTS if v in pooled):
        table.append(f"| {LABELS[variant]} | {' | '.join(pooled_cells(pooled, variant, (0, 5, 10)))} |")
    write_table(args.out, table)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    plot_pooled(ax, pooled, VARIANTS, LABELS, step=0.15)
    ax.set_xlabel("iteration")
    ax.set_ylabel("held-out success (2 seeds x 64 rooms, 95 % Wilson)")
    ax.set_xticks([0, 5, 10])
    ax.set_title("GRPO objectives on 6x6 Sokoban, SmolLM2-135M, shared SFT warm start")
    ax.legend(fontsize=8)
    save_plot(fig, args.plot, args.out)


if __name__ == "__main__":
    main()
