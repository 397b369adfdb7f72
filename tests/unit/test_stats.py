"""Paired differences between two evals of the same tasks: exact McNemar, Tango's interval (its exact coverage), the
task bootstrap and the comparison over training seeds against hand-computed values, and the floor and verdict records
built on them."""

from __future__ import annotations

import numpy as np
import pytest

from agentforge.evaluation.summary import floor_row, run_verdicts
from agentforge.stats import (
    BOOTSTRAP_RESAMPLES,
    Z95,
    clopper_pearson,
    conditional_mapping_interval,
    exact_coverage,
    mcnemar_exact_p,
    paired_difference,
    pairs_needed,
    seed_difference,
    tango_interval,
    tango_score,
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
    assert diff.method == "exact McNemar; Tango score interval" and diff.beyond_noise and diff.low > 0
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
    # every task gained: no sign flip is as extreme, yet the p-value counts the observed one, (0 + 1) / (B + 1)
    gained = paired_difference({f"t{i}": [False, False] for i in range(40)}, {f"t{i}": [True, True] for i in range(40)})
    assert gained.p_value == pytest.approx(1 / (BOOTSTRAP_RESAMPLES + 1))


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


# ---- Tango's score interval for one episode per task -------------------------------------------------------------
# (tasks, P(before only), P(after only)); the first is the audit's one-way change (issue 55)
COVERAGE_POINTS = [(256, 0.0, 0.225), (256, 0.05, 0.15), (64, 0.1, 0.1), (128, 0.0, 0.05), (32, 0.2, 0.05)]


@pytest.mark.parametrize("point", COVERAGE_POINTS)
def test_tango_interval_covers_at_least_93_percent(point):
    assert exact_coverage(tango_interval, *point) >= 0.93


def test_the_old_mapping_under_covers_a_one_way_change():
    assert exact_coverage(conditional_mapping_interval, *COVERAGE_POINTS[0]) < 0.5  # 0.35: the test above can fail


def test_no_tango_interval_ends_at_its_estimate_or_is_nan():
    for n in (1, 7, 64, 256):
        b, c = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        b, c = b[b + c <= n], c[b + c <= n]
        low, high = tango_interval(b, c, n)
        estimate = (c - b) / n
        assert np.all(np.isfinite(low) & np.isfinite(high)) and np.all((low >= -1) & (high <= 1))
        inner = (b + c > 0) & (np.abs(estimate) < 1)  # at ±1 (every task flipped) the interval must stop at ±1
        assert np.all(low[inner] < estimate[inner]) and np.all(estimate[inner] < high[inner])
        nothing = (b == 0) & (c == 0)  # all solved or none: a real interval around 0, ±z² / (n + z²)
        assert float(high[nothing][0]) == pytest.approx(Z95 ** 2 / (n + Z95 ** 2))
        assert float(low[nothing][0]) == pytest.approx(-Z95 ** 2 / (n + Z95 ** 2))


def test_tango_score_at_no_change_is_the_mcnemar_z_and_the_exact_test_keeps_the_verdict():
    assert tango_score(3, 12, 50, 0.0) == pytest.approx(9 / np.sqrt(15))
    # 5 gained, none lost: the score interval excludes 0, the exact test does not (p = 1/16): within noise
    diff = paired_difference(outcomes("0" * 5 + "0" * 55), outcomes("1" * 5 + "0" * 55))
    assert diff.low > 0 and diff.p_value == pytest.approx(0.0625) and not diff.beyond_noise
    assert diff.to_json()["decided_by"] == "p_value" and diff.direction == "within noise"


# ---- comparisons over training seeds -----------------------------------------------------------------------------
def runs(*rates: float, tasks: int = 100) -> list[dict[str, list[bool]]]:
    """One run per rate (in seed order): its first `rate × tasks` tasks solved, one episode each."""
    return [{f"t{i}": [i < round(r * tasks)] for i in range(tasks)} for r in rates]


def test_seed_difference_pairs_runs_by_seed_and_repeats():
    before = runs(0.25, 0.25, 0.25)
    after = runs(0.5, 0.5, 0.5)
    first, second = seed_difference(before, after), seed_difference(before, after)
    assert first == second and first.per_seed == (0.25, 0.25, 0.25) and first.difference == pytest.approx(0.25)
    assert first.seeds == 3 and first.tasks == 300 and first.beyond_noise and first.direction == "better beyond noise"
    assert first.low < 0.25 < first.high  # identical seeds: the t interval is a point, the task bootstrap is not
    assert first.sign_flip_p == 0.25  # 3 seeds: 2 of the 8 flips are as extreme, whatever the gain
    assert "3 training seeds: +25.0% / +25.0% / +25.0%" in first.describe()


def test_seeds_that_disagree_widen_the_interval_and_get_no_verdict():
    agree = seed_difference(runs(0.3, 0.3, 0.3), runs(0.43, 0.43, 0.44))
    disagree = seed_difference(runs(0.3, 0.3, 0.3), runs(0.55, 0.5, 0.25))  # +25, +20, -5: the same +13.3 mean
    assert agree.difference == pytest.approx(disagree.difference)
    assert agree.beyond_noise and not disagree.beyond_noise and disagree.direction == "within noise"
    assert disagree.high - disagree.low > 2 * (agree.high - agree.low)
    assert disagree.low < 0 < disagree.high and disagree.p_value >= 0.05


def test_fewer_than_three_seeds_get_no_verdict_however_large_the_gain():
    two = seed_difference(runs(0.0, 0.0), runs(0.9, 0.9))
    assert two.direction == "no verdict (2 seeds; need ≥ 3)" and not two.beyond_noise
    assert two.to_json()["beyond_noise"] is False and two.to_json()["per_seed"] == pytest.approx((0.9, 0.9))
    one = seed_difference(runs(0.0), runs(0.9))
    assert one.t_interval is None and one.direction == "no verdict (1 seed; need ≥ 3)"


def test_seed_difference_refuses_unpaired_input():
    with pytest.raises(ValueError, match="same number of runs"):
        seed_difference(runs(0.1, 0.2), runs(0.1))
    with pytest.raises(ValueError, match="seed 0: the two runs share no held-out task"):
        seed_difference([outcomes("1", "a")], [outcomes("1", "b")])
