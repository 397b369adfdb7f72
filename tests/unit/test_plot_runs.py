"""Side-by-side run plots: one line per run, eval points only where they were logged."""

from __future__ import annotations

import json

import pytest

from agentforge.tracking.plotting import plot_runs_side_by_side

pytestmark = pytest.mark.unit


def test_two_runs_side_by_side(tmp_path):
    runs = {}
    for name, slope in (("gigpo", 0.01), ("tjpo", 0.02)):
        run = tmp_path / name
        run.mkdir()
        rows = [{"iteration": i, "train/success_rate": slope * i} | ({"eval/div_pair/x": slope} if i % 5 == 0 else {})
                for i in range(11)]
        (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
        runs[name] = run
    out = plot_runs_side_by_side(runs, ["train/success_rate", "eval/div_pair/x"], tmp_path / "cmp" / "runs.png", "t")
    assert out.exists() and out.stat().st_size > 10_000
