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


def test_the_plain_verdict_says_what_shipped_warm_start_and_rl_did_with_paired_verdicts():
    from agentforge.training.plain_verdict import plain_verdict

    tasks = [f"t{i}" for i in range(100)]

    def solved(n):  # the first n tasks solved, one episode each
        return {t: [i < n] for i, t in enumerate(tasks)}

    outcomes = {"base": solved(20), "0": solved(40), "10": solved(42)}
    lines = plain_verdict("test", outcomes, solved(30), "gigpo", warm_start=True)
    assert len(lines) == 3
    assert lines[0].startswith("The model as shipped solved 20.0% of 100 test tasks") and "30.0%" in lines[0]
    assert "warm start" in lines[1] and "40.0%" in lines[1] and "+20.0 points vs the model as shipped" in lines[1]
    assert "beyond noise" in lines[1]  # 20 discordant tasks one way: the exact test rejects
    assert lines[2].startswith("RL (10 gigpo iterations) took it to 42.0%: +2.0 points vs the warm start")
    assert "within noise" in lines[2].split(";")[0] and "vs the random policy" in lines[2]
    no_warm = plain_verdict("eval", {"base": solved(20), "5": solved(20)}, None, "grpo", warm_start=False)
    assert no_warm[1] == "No warm start" and "vs its start" in no_warm[2] and "random" not in no_warm[2]
    assert plain_verdict("eval", {"base": solved(3)}, None, "grpo", warm_start=False) == []
