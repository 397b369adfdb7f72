"""What the comparison summaries share (scripts/objective_comparison.py, scripts/async_comparison.py): the runs of
each variant and seed, their held-out evals with 95 % Wilson intervals, pooling over seeds, and the pooled-success
plot with its error bars.

Imported as a sibling module: a script run as `python scripts/<name>.py` has scripts/ first on sys.path.

What the pooled intervals say: how precisely each variant's success over all its seeds' episodes is measured (eval
noise only: the seeds' episodes count as one sample). They are no verdict between variants: two training runs of
one variant differ by more than that, so a variant against another needs the seed as the unit (per-task outcomes
through scripts/compare_methods.py or scripts/pooled_verdict.py --against: agentforge.stats.seed_difference, no
verdict under 3 seeds). Overlapping or not, these bars decide nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from agentforge.stats import wilson_interval
from agentforge.tracking.tracker import read_metrics

Pooled = dict[str, dict[int, list[tuple[float, int]]]]  # variant -> iteration -> (success rate, episodes) per seed


def variant_runs(out: Path, variants: Iterable[str], seeds: Iterable[int] = (0, 1)) -> dict[tuple[str, int], Path]:
    """The finished-or-running runs `<out>/<variant>-seed<seed>` that have metrics."""
    runs = {(v, s): out / f"{v}-seed{s}" for v in variants for s in seeds}
    return {k: p for k, p in runs.items() if (p / "metrics.jsonl").is_file()}


def evals(run: Path) -> dict[int, tuple[float, int]]:
    """iteration -> (success rate, episodes) of each eval in the run."""
    out = {}
    for row in read_metrics(run / "metrics.jsonl"):
        if "eval/success_rate" in row:
            out[int(row["iteration"])] = (float(row["eval/success_rate"]), int(row.get("eval/episodes", 0)))
    return out


def fmt(rate: float, n: int) -> str:
    lo, hi = wilson_interval(rate * n, n)
    return f"{rate:.3f} [{lo:.2f}, {hi:.2f}]"


def pooled_rate(values: list[tuple[float, int]]) -> tuple[float, int]:
    """Seeds' evals of one iteration as one: the success over all their episodes, and how many (a rate to show,
    not to compare variants with: see the module docstring)."""
    n = sum(e for _, e in values)
    return (sum(r * e for r, e in values) / n if n else float("nan")), n


def pool(pooled: Pooled, variant: str, found: Mapping[int, tuple[float, int]]) -> None:
    for i, value in found.items():
        pooled.setdefault(variant, {}).setdefault(i, []).append(value)


def pooled_cells(pooled: Pooled, variant: str, iterations: Iterable[int]) -> list[str]:
    cells = []
    for i in iterations:
        rate, n = pooled_rate(pooled[variant].get(i, []))
        cells.append(fmt(rate, n) if n else "-")
    return cells


def plot_pooled(ax: Any, pooled: Pooled, variants: Iterable[str], labels: Mapping[str, str], step: float) -> None:
    """Pooled held-out success per eval iteration with 95 % Wilson error bars, variants side by side `step` apart."""
    shown = [v for v in variants if v in pooled]
    for k, variant in enumerate(shown):
        its = sorted(pooled[variant])
        rates, lows, highs = [], [], []
        for i in its:
            rate, n = pooled_rate(pooled[variant][i])
            lo, hi = wilson_interval(rate * n, n)
            rates.append(rate)
            lows.append(rate - lo)
            highs.append(hi - rate)
        ax.errorbar(np.asarray(its) + (k - (len(shown) - 1) / 2) * step, rates, yerr=[lows, highs], marker="o",
                    capsize=3, label=labels[variant])


def write_table(out: Path, table: list[str]) -> None:
    print("\n".join(table))
    (out / "table.md").write_text("\n".join(table) + "\n")


def save_plot(fig: Any, plot: Path, out: Path) -> None:
    fig.tight_layout()
    plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(plot, dpi=120)
    print(json.dumps({"plot": str(plot), "table": str(out / "table.md")}))
