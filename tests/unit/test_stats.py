"""Paired differences between two evals of the same tasks: exact McNemar and the task bootstrap against hand-computed
values, and the floor and verdict records built on them."""

from __future__ import annotations

import pytest

from agentforge.evaluation.summary import floor_row, run_verdicts
from agentforge.stats import (
    clopper_pearson,
    mcnemar_exact_p,
    paired_difference,
    pairs_needed,
    wilson_interval,
)

pytestmark = pytest.mark.unit


def outcomes(pattern: str, prefix: str = "t") -> dict[str, list[bool]]:
    return {f"{prefix}{i}": [c == "1"] for i, c in enumerate(pattern)}


def test_exact_mcnemar_p_values_match_the_binomial_by_hand():
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(0, 6) == pytest.approx(2 * 0.5 ** 6)  # 0.03125
    assert mcnemar_exact_p(1, 9) == pytest.approx(2 * 11 / 1024)  # P(X<=1 | 10, 1/2) = 11/1024
    assert mcnemar_exact_p(5, 5) == 1.0


def test_clopper_pearson_brackets_the_wilson_interval():
    low, high = clopper_pearson(3, 10)
    assert low == pytest.approx(0.0667, abs=1e-3) and high == pytest.approx(0.6525, abs=1e-3)
    w_low, w_high = wilson_interval(3, 10)
    assert low <= w_low and high >= w_high  # exact is conservative
    assert clopper_pearson(0, 5)[0] == 0.0 and clopper_pearson(5, 5)[1] == 1.0


def test_paired_difference_counts_discordant_tasks_and_excludes_zero_only_beyond_noise():
    before = outcomes("0" * 40 + "1" * 20)
    after = outcomes("1" * 12 + "0" * 28 + "1" * 20)  # 12 tasks gained, none lost
    diff = paired_difference(before, after)
    assert (diff.only_before, diff.only_after, diff.tasks) == (0, 12, 60)
    assert diff.difference == pytest.approx(12 / 60)
    assert diff.method == "exact McNemar" and diff.beyond_noise and diff.low > 0
    assert diff.p_value == pytest.approx(mcnemar_exact_p(0, 12))
    noisy = paired_difference(outcomes("0" * 50 + "1" * 4 + "0" * 6), outcomes("0" * 50 + "0" * 4 + "1" * 6))
    assert noisy.difference == pytest.approx(2 / 60) and not noisy.beyond_noise and noisy.low < 0 < noisy.high
    assert noisy.direction == "within noise"


def test_pairing_sees_a_gain_that_unpaired_intervals_miss():
    # 100 tasks; 30 solved by both, 10 gained, 0 lost: 30 % -> 40 %. Wilson intervals overlap, the paired test does not.
    before = outcomes("1" * 30 + "0" * 70)
    after = outcomes("1" * 40 + "0" * 60)
    a_hi, b_lo = wilson_interval(30, 100)[1], wilson_interval(40, 100)[0]
    assert a_hi > b_lo  # unpaired: within noise
    assert paired_difference(before, after).beyond_noise


def test_several_episodes_per_task_use_the_task_bootstrap_and_repeat():
    before = {f"t{i}": [False, False, i % 2 == 0] for i in range(30)}
    after = {f"t{i}": [True, i % 3 == 0, i % 2 == 0] for i in range(30)}
    first, second = paired_difference(before, after), paired_difference(before, after)
    assert first.method == "paired task bootstrap" and first == second  # seeded: same data, same interval
    assert first.episodes == 90 and first.low > 0 and first.beyond_noise
    assert first.difference == pytest.approx((30 + 10) / 90)


def test_only_tasks_both_evals_played_are_paired_and_none_in_common_is_refused():
    diff = paired_difference(outcomes("1100", "a"), {**outcomes("0110", "a"), "extra": [True]})
    assert diff.tasks == 4
    with pytest.raises(ValueError, match="share no held-out task"):
        paired_difference(outcomes("1", "a"), outcomes("1", "b"))


def test_pairs_needed_for_a_ten_point_gain():
    # 10-point gain with a quarter of the tasks discordant: ~190 pairs at 80 % power
    assert 150 < pairs_needed(0.10, 0.25) < 230
    with pytest.raises(ValueError):
        pairs_needed(0.3, 0.2)


def test_run_verdicts_pair_base_start_and_floor_with_the_last_eval():
    base, start, end = outcomes("1" * 20 + "0" * 44), outcomes("1" * 10 + "0" * 54), outcomes("1" * 36 + "0" * 28)
    floor = outcomes("1" * 5 + "0" * 59)
    records = run_verdicts([("model as given", base), ("iteration 0", start), ("iteration 3", end)], floor)
    assert [(r["from"], r["to"]) for r in records] == [
        ("model as given", "iteration 3"), ("iteration 0", "iteration 3"), ("random floor", "iteration 3")]
    assert all(r["beyond_noise"] and r["difference"] > 0 for r in records)
    assert "exact McNemar" in records[0]["text"] and records[0]["tasks"] == 64
    row = floor_row(floor)
    assert row["success"] == pytest.approx(5 / 64) and row["valid_format"] is None
