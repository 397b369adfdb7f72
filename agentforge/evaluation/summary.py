"""The end-of-run summary: each eval of the run as a row, with 95 % intervals, and what the columns mean.

Why intervals: an eval of n episodes measures a rate only to about ±1/√n (16 episodes: ±25 points), so a change
between two evals means something only when it is larger than their noise. Rates get Wilson score intervals
(well-behaved at 0 and 1, unlike ±2σ). Two evals of one run play the same held-out tasks with the same sampling
seeds, so the success verdict between them is *paired* (agentforge/stats.py): with one episode per task, the exact
McNemar test decides (beyond noise when p < 0.05) and the difference gets Tango's score interval for paired
proportions; with several, a paired bootstrap over tasks, beyond noise when its 95 % interval excludes zero. The
valid-format change is *not* paired (a turn of one eval has no partner turn in the other): it compares the Wilson
intervals of two independent rates. The floor row (a uniformly random admissible action on the same tasks) says how
much of a rate is the task being easy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table

from agentforge.stats import Z95, PairedDifference, paired_difference, wilson_interval

__all__ = ["Z95", "wilson_interval", "eval_row", "floor_row", "summary_table", "verdict", "paired_verdict",
           "run_verdicts", "view_hint"]

EXPLANATION = (
    "success: episodes that reached the goal (Sokoban: every box on a target). valid format: turns written as "
    "<think>…</think><action>…</action> with an admissible action. Success can be non-zero while no turn is valid: "
    "the relaxed parser still executes a move it finds in free text (and the turn is penalised as invalid). "
    "[a, b]: 95 % interval (Wilson) over the eval's episodes or turns. random floor: a uniformly random "
    "admissible action on the same tasks. The success verdicts below compare two rows paired task by task (same "
    "tasks, same sampling seeds): one episode per task, the exact McNemar test decides (p < 0.05) and the interval "
    "is Tango's score interval; several episodes per task, a paired task bootstrap, beyond noise when its 95 % "
    "interval excludes zero. The valid-format change is unpaired: the Wilson intervals of two independent rates, "
    "beyond noise when they do not overlap."
)


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


def floor_row(outcomes: Mapping[str, Sequence[bool]]) -> dict[str, Any]:
    """The random-admissible-action floor as a table row (no format: it writes no text)."""
    played = [won for episodes in outcomes.values() for won in episodes]
    n = len(played)
    rate = sum(played) / n if n else 0.0
    return {"name": "random floor", "episodes": n, "turns": 0, "success": rate,
            "success_interval": wilson_interval(sum(played), n), "valid_format": None,
            "valid_format_interval": None, "mean_return": None}


def beyond_noise(first: dict[str, Any], last: dict[str, Any], key: str) -> bool:
    """True when the two rows' 95 % Wilson intervals for `key` do not overlap: an unpaired comparison of two
    independent rates (conservative; used where no pairing exists, e.g. valid-format turns)."""
    (a_lo, a_hi), (b_lo, b_hi) = first[f"{key}_interval"], last[f"{key}_interval"]
    return a_hi < b_lo or b_hi < a_lo


def summary_table(rows: list[dict[str, Any]], title: str = "held-out eval", explain: bool = True) -> Table:
    table = Table(title=title, caption=escape(EXPLANATION) if explain else None, caption_justify="left")
    for column in ("", "episodes", "success [95 %]", "valid format [95 %]", "mean return"):
        table.add_column(column, justify="left" if not column else "right")
    for row in rows:
        s_lo, s_hi = row["success_interval"]
        valid = "–"
        if row.get("valid_format") is not None:
            v_lo, v_hi = row["valid_format_interval"]
            valid = f"{row['valid_format']:.1%} [{v_lo:.0%}, {v_hi:.0%}]"
        mean_return = "–" if row.get("mean_return") is None else f"{row['mean_return']:+.2f}"
        table.add_row(row["name"], str(row["episodes"]), f"{row['success']:.1%} [{s_lo:.0%}, {s_hi:.0%}]",
                      valid, mean_return)
    return table


def verdict(first: dict[str, Any], last: dict[str, Any]) -> str:
    """Valid-format turns between two rows, unpaired: the Wilson intervals of two independent rates, beyond noise
    when they do not overlap. Why not paired: the two evals play different turns (a turn has no partner turn in the
    other eval); success, matched task by task, gets the paired verdict instead (paired_verdict)."""
    change = "changed beyond noise" if beyond_noise(first, last, "valid_format") else "changed within noise"
    return (f"{first['name']} → {last['name']}: valid-format turns {first['valid_format']:.1%} → "
            f"{last['valid_format']:.1%}: {change} (unpaired: Wilson intervals of the two rates)")


def paired_verdict(before_name: str, after_name: str, before: Mapping[str, Sequence[bool]],
                   after: Mapping[str, Sequence[bool]]) -> dict[str, Any] | None:
    """The paired success verdict between two evals of the same tasks as a record (None: no common task)."""
    try:
        difference: PairedDifference = paired_difference(before, after)
    except ValueError:
        return None
    return {**difference.to_json(), "from": before_name, "to": after_name, "metric": "success",
            "text": f"{before_name} → {after_name}: success {difference.describe()}"}


def run_verdicts(named_outcomes: list[tuple[str, Mapping[str, Sequence[bool]]]],
                 floor: Mapping[str, Sequence[bool]] | None = None) -> list[dict[str, Any]]:
    """A run's paired verdicts: the model as given → the end, the start of RL (after a warm start) → the end, and the
    end against the random floor; `named_outcomes` in eval order, the model as given first when there is one."""
    if not named_outcomes:
        return []
    records = []
    last_name, last = named_outcomes[-1]
    for name, outcomes in named_outcomes[:-1][:2]:
        record = paired_verdict(name, last_name, outcomes, last)
        if record is not None:
            records.append(record)
    if floor:
        record = paired_verdict("random floor", last_name, floor, last)
        if record is not None:
            records.append(record)
    return records


def view_hint(run_dir: Any) -> str:
    """The command that turns a run's trajectories into a page, named at the end of every train and eval run (the
    page itself is written on demand: a long run's page can take seconds and megabytes)."""
    return f"agentforge view {run_dir}  (writes {run_dir}/trajectories.html)"
