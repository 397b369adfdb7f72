"""Summarise scripts/objective_comparison.sh: held-out success per objective and seed with 95 % intervals, pooled
over seeds, seconds per iteration, and a plot (docs/img/objective_comparison_sokoban.png).

Usage: python scripts/objective_comparison.py runs/objective_comparison [--plot docs/img/...png]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from agentforge.tracking.tracker import read_metrics
from agentforge.training.summary import wilson_interval

VARIANTS = ("vanilla", "dr_grpo", "gspo", "ppo_epochs2")
LABELS = {"vanilla": "today (PPO clip, token-mean)", "dr_grpo": "Dr. GRPO", "gspo": "GSPO",
          "ppo_epochs2": "ppo_epochs=2"}


def evals(run: Path) -> dict[int, tuple[float, int]]:
    """iteration -> (success rate, episodes) of each eval in the run."""
    out = {}
    for row in read_metrics(run / "metrics.jsonl"):
        if "eval/success_rate" in row:
            out[int(row["iteration"])] = (float(row["eval/success_rate"]), int(row.get("eval/episodes", 0)))
    return out


def seconds_per_iteration(run: Path) -> float:
    times = [r["time/iteration"] for r in read_metrics(run / "metrics.jsonl") if "time/iteration" in r]
    return float(np.mean(times)) if times else float("nan")


def fmt(rate: float, n: int) -> str:
    lo, hi = wilson_interval(rate * n, n)
    return f"{rate:.3f} [{lo:.2f}, {hi:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--plot", type=Path, default=Path("docs/img/objective_comparison_sokoban.png"))
    args = parser.parse_args()
    runs = {(v, s): args.out / f"{v}-seed{s}" for v in VARIANTS for s in (0, 1)}
    runs = {k: p for k, p in runs.items() if (p / "metrics.jsonl").is_file()}
    table = ["| objective | seed | success it 0 | it 5 | it 10 | train success (all its) | s/iteration |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    pooled: dict[str, dict[int, list[tuple[float, int]]]] = {}
    for (variant, seed), run in sorted(runs.items()):
        found = evals(run)
        rows = read_metrics(run / "metrics.jsonl")
        train = [r["train/success_rate"] for r in rows if "train/success_rate" in r]
        cells = [fmt(*found[i]) if i in found else "-" for i in (0, 5, 10)]
        table.append(f"| {LABELS[variant]} | {seed} | {' | '.join(cells)} | {np.mean(train):.3f} | "
                     f"{seconds_per_iteration(run):.0f} |")
        for i, value in found.items():
            pooled.setdefault(variant, {}).setdefault(i, []).append(value)
    table += ["", "| objective | pooled success it 0 | it 5 | it 10 |", "| --- | --- | --- | --- |"]
    for variant in VARIANTS:
        if variant not in pooled:
            continue
        cells = []
        for i in (0, 5, 10):
            values = pooled[variant].get(i, [])
            n = sum(e for _, e in values)
            cells.append(fmt(sum(r * e for r, e in values) / n, n) if n else "-")
        table.append(f"| {LABELS[variant]} | {' | '.join(cells)} |")
    print("\n".join(table))
    (args.out / "table.md").write_text("\n".join(table) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for k, variant in enumerate(v for v in VARIANTS if v in pooled):
        its = sorted(pooled[variant])
        rates, lows, highs = [], [], []
        for i in its:
            n = sum(e for _, e in pooled[variant][i])
            rate = sum(r * e for r, e in pooled[variant][i]) / n
            lo, hi = wilson_interval(rate * n, n)
            rates.append(rate)
            lows.append(rate - lo)
            highs.append(hi - rate)
        ax.errorbar(np.asarray(its) + (k - 1.5) * 0.15, rates, yerr=[lows, highs], marker="o", capsize=3,
                    label=LABELS[variant])
    ax.set_xlabel("iteration")
    ax.set_ylabel("held-out success (2 seeds x 64 rooms, 95 % Wilson)")
    ax.set_xticks([0, 5, 10])
    ax.set_title("GRPO objectives on 6x6 Sokoban, SmolLM2-135M, shared SFT warm start")
    ax.legend(fontsize=8)
    fig.tight_layout()
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=120)
    print(json.dumps({"plot": str(args.plot), "table": str(args.out / "table.md")}))


if __name__ == "__main__":
    main()
