"""The end-of-run summary: each eval of the run as a row, with 95 % intervals, and what the columns mean.

Why intervals: an eval of n episodes measures a rate only to about ±1/√n (16 episodes: ±25 points), so a change
between two evals means something only when it is larger than their noise. Rates get Wilson score intervals
(well-behaved at 0 and 1, unlike ±2σ); two rows differ beyond noise when their intervals do not overlap.
"""

from __future__ import annotations

import math
from typing import Any

from rich.markup import escape
from rich.table import Table

Z95 = 1.959964

EXPLANATION = (
    "success: episodes that reached the goal (Sokoban: every box on a target). valid format: turns written as "
    "<think>…</think><action>…</action> with an admissible action. Success can be non-zero while no turn is valid: "
    "the relaxed parser still executes a move it finds in free text (and the turn is penalised as invalid). "
    "[a, b]: 95 % interval (Wilson) over the eval's episodes or turns; two rows differ beyond noise when their "
    "intervals do not overlap."
)


def wilson_interval(successes: float, n: float, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial rate; (0, 1) when there is no observation."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def eval_row(name: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """One eval as rates with intervals: success over episodes, valid format over turns."""
    episodes = float(metrics.get("eval/episodes", 0))
    turns = episodes * float(metrics.get("eval/mean_turns", 0.0))
    success = float(metrics.get("eval/success_rate", 0.0))
    valid = 1.0 - float(metrics.get("eval/invalid_action_rate", 0.0))
    return {
        "name": name, "episodes": int(episodes), "turns": int(round(turns)),
        "success": success, "success_interval": wilson_interval(success * episodes, episodes),
        "valid_format": valid, "valid_format_interval": wilson_interval(valid * turns, turns),
        "mean_return": float(metrics.get("eval/mean_return", 0.0)),
    }


def beyond_noise(first: dict[str, Any], last: dict[str, Any], key: str) -> bool:
    """True when the two rows' 95 % intervals for `key` do not overlap."""
    (a_lo, a_hi), (b_lo, b_hi) = first[f"{key}_interval"], last[f"{key}_interval"]
    return a_hi < b_lo or b_hi < a_lo


def summary_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="held-out eval", caption=escape(EXPLANATION), caption_justify="left")
    for column in ("", "episodes", "success [95 %]", "valid format [95 %]", "mean return"):
        table.add_column(column, justify="left" if not column else "right")
    for row in rows:
        s_lo, s_hi = row["success_interval"]
        v_lo, v_hi = row["valid_format_interval"]
        table.add_row(row["name"], str(row["episodes"]), f"{row['success']:.1%} [{s_lo:.0%}, {s_hi:.0%}]",
                      f"{row['valid_format']:.1%} [{v_lo:.0%}, {v_hi:.0%}]", f"{row['mean_return']:+.2f}")
    return table


def verdict(first: dict[str, Any], last: dict[str, Any]) -> str:
    """One sentence per rate: did it change beyond the eval's noise between the first and the last row?"""
    parts = []
    for key, label in (("success", "success"), ("valid_format", "valid-format turns")):
        change = "changed beyond noise" if beyond_noise(first, last, key) else "changed within noise"
        parts.append(f"{label} {first[key]:.1%} → {last[key]:.1%}: {change}")
    return f"{first['name']} → {last['name']}: " + "; ".join(parts)


def view_hint(run_dir: Any) -> str:
    """The command that turns a run's trajectories into a page, named at the end of every train and eval run (the
    page itself is written on demand: a long run's page can take seconds and megabytes)."""
    return f"agentforge view {run_dir}  (writes {run_dir}/trajectories.html)"
