"""A finished (or stopped) run's per-task held-out outcomes, by split: what the comparison scripts and the results
rebuild read.

Where they are: summary.json holds the eval split's under `eval_outcomes` (choosing settings) and the test split's
under `test.outcomes` (the claim), each with the random floor's (`floor_outcomes`, `test.floor_outcomes`); a run
stopped before its summary keeps them in its newest checkpoint's trainer state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Outcomes = dict[str, list[bool]]
SPLITS = ("test", "eval")


def split_summary(run: Path, split: str) -> dict[str, Any]:
    """The part of a run's summary.json that holds `split`: its `test` block, or the top level (eval)."""
    path = Path(run) / "summary.json"
    summary = json.loads(path.read_text()) if path.is_file() else {}
    return summary.get("test", {}) if split == "test" else summary


def run_outcomes(run: Path, split: str = "test") -> dict[str, Outcomes]:
    """Each eval's per-task outcomes ("base", "0", iterations) on `split`, from the summary or the newest
    checkpoint; a clear error where the run has none (a run evaluates on test with trainer.test_tasks > 0)."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}; valid: {', '.join(SPLITS)}")
    found = split_summary(run, split).get("outcomes" if split == "test" else "eval_outcomes") or {}
    if found:
        return found
    key = "test_outcomes" if split == "test" else "eval_outcomes"
    states = sorted(Path(run).glob("checkpoints/iter_*/trainer_state.json"))
    saved = json.loads(states[-1].read_text()).get(key) if states else None
    if not saved:
        raise SystemExit(f"{run}: no {split} outcomes in summary.json or a checkpoint: nothing to pair (a run "
                         f"evaluates on test with trainer.test_tasks > 0; the eval split is --split eval)")
    return saved


def run_floor(run: Path, split: str = "test") -> Outcomes | None:
    """The random floor's per-task outcomes on `split`'s tasks as the run recorded them (None: none recorded)."""
    return split_summary(run, split).get("floor_outcomes") or None
