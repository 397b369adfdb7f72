"""The end-of-run summary's intervals: Wilson scores against hand-computed values, and the valid-format verdict."""

from __future__ import annotations

import pytest

from agentforge.evaluation.summary import beyond_noise, eval_row, verdict
from agentforge.stats import wilson_interval

pytestmark = pytest.mark.unit


def test_wilson_interval_matches_hand_computed_values():
    lo, hi = wilson_interval(2, 16)  # p = 0.125, n = 16
    assert lo == pytest.approx(0.0350, abs=5e-4) and hi == pytest.approx(0.3602, abs=5e-4)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    narrow, wide = wilson_interval(32, 64), wilson_interval(8, 16)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]  # more episodes, a tighter interval


def test_a_change_counts_only_beyond_the_eval_noise():
    def metrics(success, invalid, episodes):
        return {"eval/episodes": episodes, "eval/mean_turns": 5.0, "eval/success_rate": success,
                "eval/invalid_action_rate": invalid, "eval/mean_return": 0.0}

    base = eval_row("base", metrics(0.125, 1.0, 16))
    small = eval_row("after", metrics(0.1875, 0.0, 16))
    assert not beyond_noise(base, small, "success") and beyond_noise(base, small, "valid_format")
    big = eval_row("after", metrics(0.6, 0.02, 64))
    assert beyond_noise(eval_row("base", metrics(0.125, 1.0, 64)), big, "success")
    text = verdict(base, small)
    assert "success" not in text  # success gets the paired verdict (tests/unit/test_stats.py)
    assert "valid-format turns 0.0% → 100.0%: changed beyond noise" in text
