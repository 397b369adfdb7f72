"""Training-curve plots from metrics.jsonl (PNG), because curves are what people look at."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from agentforge.stats import wilson_interval  # noqa: E402
from agentforge.tracking.tracker import read_metrics  # noqa: E402

PANELS: list[tuple] = [
    ("success rate", ["train/success_rate", "base/success_rate", "eval/success_rate", "test_base/success_rate",
                      "test/success_rate"]),
    # time-to-success: held-out success against training time (evals not counted) and against episodes played
    ("held-out success vs training minutes", ["base/success_rate", "eval/success_rate", "test/success_rate"],
     "time/train_elapsed"),
    ("held-out success vs episodes", ["base/success_rate", "eval/success_rate", "test/success_rate"],
     "train/episodes_total"),
    ("return", ["train/mean_return", "eval/mean_return"]),
    ("invalid-action rate", ["train/invalid_action_rate", "eval/invalid_action_rate"]),
    ("policy loss", ["train/loss"]),
    ("grad norm", ["train/grad_norm"]),
    ("seconds per iteration", ["time/iteration"]),
]
X_LABELS = {"iteration": "iteration", "time/train_elapsed": "training minutes (rollout, update, sync, warm start)",
            "train/episodes_total": "training episodes"}


def x_value(row: dict, key: str, x_key: str) -> float | None:
    """A row's position on a panel's x axis; the model as given (base/…) stands at the start of training."""
    if x_key == "iteration":
        return row.get("iteration")
    if key.startswith("base/"):
        return 0.0
    value = row.get(x_key)
    if not isinstance(value, int | float):
        return None
    return value / 60 if x_key == "time/train_elapsed" else value


SFT_PANELS = [("SFT loss", ["sft/loss"]), ("grad norm", ["sft/grad_norm"])]
# success by the expert's solution length (evaluation/depth.py), added when an eval logged it
DEPTH_PANEL = ("held-out success by solution length (moves)",
               [f"{split}/success_depth_{b}" for split in ("eval", "test") for b in ("1", "2", "3+")])


def rate_interval(row: dict, key: str) -> tuple[float, float] | None:
    """The 95 % Wilson interval of a logged rate: success over the row's episodes, invalid actions over its turns;
    None when the row does not say how many there were."""
    prefix, _, name = key.partition("/")
    if name.startswith("success_depth_"):  # logged with its own interval and episode count per bucket
        low, high = row.get(f"{key}_lo"), row.get(f"{key}_hi")
        return (float(low), float(high)) if isinstance(low, int | float) and isinstance(high, int | float) else None
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
    metrics_path: Path, out_path: Path, title: str = "", panels: list[tuple] | None = None,
    floor: float | None = None,
) -> Path:
    """One PNG with a panel per quantity; train lines solid, eval lines dashed with markers. Rates carry their 95 %
    interval (eval: error bars, train: a band), so noise is visible at a glance; iterations are whole numbers.
    A panel is (title, keys) against iterations or (title, keys, x key); `floor` (the random-action success on
    the eval tasks) is drawn on the success panels as a dotted line."""
    rows = read_metrics(metrics_path)
    if panels is None and any(k in r for r in rows for k in DEPTH_PANEL[1]):
        panels = [*PANELS, DEPTH_PANEL]
    panels = panels or PANELS
    columns = min(3, len(panels))
    rows_n = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows_n, columns, figsize=(4.7 * columns, 3.5 * rows_n), squeeze=False)
    for ax, (label, keys, *x_spec) in zip(axes.flat, panels, strict=False):
        x_key = x_spec[0] if x_spec else "iteration"
        for key in keys:
            kept = [r for r in rows if isinstance(r.get(key), int | float) and x_value(r, key, x_key) is not None]
            if not kept:
                continue
            xs, ys = [x_value(r, key, x_key) for r in kept], [r[key] for r in kept]
            intervals = [rate_interval(r, key) for r in kept]
            known = all(i is not None for i in intervals)
            if key.startswith(("eval/", "base/")) or "_depth_" in key:  # evals: points with error bars
                errors = [[max(0.0, y - lo) for y, (lo, _) in zip(ys, intervals, strict=True)],
                          [max(0.0, hi - y) for y, (_, hi) in zip(ys, intervals, strict=True)]] if known else None
                marker = "s" if key.startswith("base/") else "o"
                ax.errorbar(xs, ys, yerr=errors, linestyle="--", marker=marker, capsize=3,
                            label=f"{key} (95 %)" if known else key)
            else:
                (line,) = ax.plot(xs, ys, label=key)
                if known:
                    ax.fill_between(xs, [lo for lo, _ in intervals], [hi for _, hi in intervals],
                                    color=line.get_color(), alpha=0.15, linewidth=0)
        if floor is not None and "success" in label:
            ax.axhline(floor, color="grey", linestyle=":", label="random floor")
        ax.set_title(label)
        ax.set_xlabel(X_LABELS.get(x_key, x_key))
        if x_key != "time/train_elapsed":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if ax.lines or ax.collections:
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
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
