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


def test_training_curves_draw_rate_intervals_and_whole_iterations(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from agentforge.stats import wilson_interval
    from agentforge.tracking import plotting

    rows = [{"iteration": i, "train/success_rate": 0.25, "train/episodes": 16, "train/mean_turns": 3.0,
             "train/invalid_action_rate": 0.1}
            | ({"eval/success_rate": 0.625, "eval/episodes": 32} if i in (0, 3) else {}) for i in range(4)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert plotting.rate_interval(rows[0], "eval/success_rate") == wilson_interval(20, 32)
    assert plotting.rate_interval(rows[1], "train/invalid_action_rate") == pytest.approx(wilson_interval(4.8, 48))
    assert plotting.rate_interval(rows[1], "eval/success_rate") is None
    figures = []
    original = plt.close
    plotting.plt.close = figures.append  # keep the figure to look at it
    try:
        plotting.plot_training_curves(tmp_path / "metrics.jsonl", tmp_path / "curves.png")
    finally:
        plotting.plt.close = original
    success = figures[0].axes[0]
    assert any(isinstance(c, ErrorbarContainer) for c in success.containers)  # eval: error bars
    assert success.collections  # train: a band
    assert all(float(t).is_integer() for t in success.get_xticks())


def test_success_by_solution_length_gets_its_own_panel_when_an_eval_logged_it(tmp_path):
    import matplotlib.pyplot as plt

    from agentforge.tracking import plotting

    depth = {"eval/success_depth_1": 0.8, "eval/success_depth_1_lo": 0.6, "eval/success_depth_1_hi": 0.9,
             "eval/success_depth_3+": 0.1, "eval/success_depth_3+_lo": 0.02, "eval/success_depth_3+_hi": 0.3}
    rows = [{"iteration": i, "train/success_rate": 0.25} | (depth if i in (0, 3) else {}) for i in range(4)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert plotting.rate_interval(rows[0], "eval/success_depth_3+") == (0.02, 0.3)
    figures = []
    original = plt.close
    plotting.plt.close = figures.append
    try:
        plotting.plot_training_curves(tmp_path / "metrics.jsonl", tmp_path / "curves.png")
    finally:
        plotting.plt.close = original
    panel = next(ax for ax in figures[0].axes if "solution length" in ax.get_title())
    assert {t.get_text() for t in panel.get_legend().get_texts()} == {"eval/success_depth_1 (95 %)",
                                                                       "eval/success_depth_3+ (95 %)"}
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps({"iteration": i, "train/success_rate": 0.2})
                                                     for i in range(3)))
    figures.clear()
    plotting.plt.close = figures.append
    try:
        plotting.plot_training_curves(tmp_path / "metrics.jsonl", tmp_path / "curves.png")
    finally:
        plotting.plt.close = original
    assert not any("solution length" in ax.get_title() for ax in figures[0].axes)  # no depth logged: no panel
