"""Training-curve plots from metrics.jsonl (PNG), because curves are what people look at."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from agentforge.tracking.tracker import read_metrics  # noqa: E402
from agentforge.training.summary import wilson_interval  # noqa: E402

PANELS = [
    ("success rate", ["train/success_rate", "eval/success_rate"]),
    ("return", ["train/mean_return", "eval/mean_return"]),
    ("invalid-action rate", ["train/invalid_action_rate", "eval/invalid_action_rate"]),
    ("policy loss", ["train/loss"]),
    ("grad norm", ["train/grad_norm"]),
    ("seconds per iteration", ["time/iteration"]),
]


SFT_PANELS = [("SFT loss", ["sft/loss"]), ("grad norm", ["sft/grad_norm"])]


def rate_interval(row: dict, key: str) -> tuple[float, float] | None:
    """The 95 % Wilson interval of a logged rate: success over the row's episodes, invalid actions over its turns;
    None when the row does not say how many there were."""
    prefix, _, name = key.partition("/")
    episodes = row.get(f"{prefix}/episodes")
    if not isinstance(episodes, int | float) or episodes <= 0 or not isinstance(row.get(key), int | float):
        return None
    if name == "success_rate":
        n = float(episodes)
    elif name == "invalid_action_rate" and isinstance(row.get(f"{prefix}/mean_turns"), int | float):
        n = float(episodes) * float(row[f"{prefix}/mean_turns"])
    else:
        return None
    return wilson_interval(float(row[key]) * n, n) if n > 0 else None


def plot_training_curves(
    metrics_path: Path, out_path: Path, title: str = "", panels: list[tuple[str, list[str]]] | None = None
) -> Path:
    """One PNG with a panel per quantity; train lines solid, eval lines dashed with markers. Rates carry their 95 %
    interval (eval: error bars, train: a band), so noise is visible at a glance; iterations are whole numbers."""
    rows = read_metrics(metrics_path)
    panels = panels or PANELS
    columns = min(3, len(panels))
    rows_n = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows_n, columns, figsize=(4.7 * columns, 3.5 * rows_n), squeeze=False)
    for ax, (label, keys) in zip(axes.flat, panels, strict=False):
        for key in keys:
            kept = [r for r in rows if isinstance(r.get(key), int | float)]
            if not kept:
                continue
            xs, ys = [r["iteration"] for r in kept], [r[key] for r in kept]
            intervals = [rate_interval(r, key) for r in kept]
            known = all(i is not None for i in intervals)
            if key.startswith("eval/"):
                errors = [[max(0.0, y - lo) for y, (lo, _) in zip(ys, intervals, strict=True)],
                          [max(0.0, hi - y) for y, (_, hi) in zip(ys, intervals, strict=True)]] if known else None
                ax.errorbar(xs, ys, yerr=errors, linestyle="--", marker="o", capsize=3,
                            label=f"{key} (95 %)" if known else key)
            else:
                (line,) = ax.plot(xs, ys, label=key)
                if known:
                    ax.fill_between(xs, [lo for lo, _ in intervals], [hi for _, hi in intervals],
                                    color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_title(label)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return out_path


def plot_runs_side_by_side(
    runs: dict[str, Path], keys: list[str], out_path: Path, title: str = ""
) -> Path:
    """One panel per metric, one line per run (label -> run dir with metrics.jsonl): e.g. TJPO against GiGPO."""
    columns = min(3, len(keys))
    rows_n = -(-len(keys) // columns)
    fig, axes = plt.subplots(rows_n, columns, figsize=(4.7 * columns, 3.5 * rows_n), squeeze=False)
    for label, run_dir in runs.items():
        rows = read_metrics(Path(run_dir) / "metrics.jsonl")
        for ax, key in zip(axes.flat, keys, strict=False):
            points = [(r["iteration"], r[key]) for r in rows if isinstance(r.get(key), int | float)]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o" if key.startswith("eval/") else None, label=label)
    for ax, key in zip(axes.flat, keys, strict=False):
        ax.set_title(key)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path
