"""Rates and paired differences with 95 % intervals: the statistics every eval table and verdict uses.

It stands at the ground floor (imports nothing of agentforge; evaluation/__init__ holds only a docstring), so
summaries, plots, eval reports and sweep reports share one definition.

Why paired: two evals of the same held-out tasks with the same sampling seeds share most of their variance (an easy
room is solved by both policies). Comparing two independent Wilson intervals throws that away and needs ~2× the
tasks to see the same gain; a paired test looks only at the tasks on which the two policies differ.

- one episode per task (the default eval): the **exact McNemar test** on the discordant pairs (b: solved before only,
  c: after only) gives the p-value and the verdict (beyond noise when p < 0.05), and the difference in success
  (c - b) / n gets **Tango's score interval** (Tango 1998, Stat Med 17:891): the differences Δ0 whose score statistic
  (c - b - nΔ0) / sqrt(n (2 q + Δ0 (1 - Δ0))), q the maximum-likelihood P(before only) given Δ0, is within ±1.96.
  It depends on b, c and n only and keeps close to 95 % coverage when the change runs one way (exact coverage 0.949
  to 0.962 at the points tests/unit/test_stats.py enumerates). The old interval, the Clopper-Pearson interval of
  c / d mapped through d / n, took the discordant share d / n as known: 35 % coverage at n = 256 with no task lost,
  and its upper end sat on the estimate. Tango's is never a point (b = c = 0 gives ±1.96² / (n + 1.96²)). It is the
  asymptotic test's interval, so at the margin it can exclude zero while the exact test's p is just above 0.05 (5
  tasks gained, none lost: p = 0.0625); the verdict then follows the exact test (within noise).
- several episodes per task (eval_group_size > 1): episodes of one task are not independent, so the task is the unit:
  a **paired bootstrap over tasks** (10,000 resamples, fixed seed: the same data give the same interval), percentile
  interval, and a sign-flip permutation p-value over the per-task differences, (k + 1) / (B + 1) (never 0).
- two settings or methods, each trained with several seeds (`seed_difference`): a training run is a draw too, and two
  runs of one method differ by more than their eval noise, so pooling the seeds' outcomes per task understates the
  noise. The seed is the unit: see `seed_difference` for the interval, and no verdict with fewer than 3 seeds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as scipy_stats

Z95 = 1.959964
ALPHA = 0.05
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20_261_203
MIN_SEEDS = 3  # fewer training seeds than this: no verdict (run-to-run variance is not estimable enough)
EXACT_SIGN_FLIPS = 16  # up to this many seeds the sign-flip p-value enumerates all 2^seeds flips
BISECTIONS = 60  # halvings of [-1, 1] for Tango's interval: far below float resolution of a difference
SEED_METHOD = "per-seed t ∪ hierarchical bootstrap (seeds, then tasks)"


def wilson_interval(successes: float, n: float, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial rate; (0, 1) when there is no observation."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(max(0.0, p * (1 - p) / n + z * z / (4 * n * n))) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def clopper_pearson(successes: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The exact (conservative) binomial interval; (0, 1) when there is no observation."""
    if n <= 0:
        return 0.0, 1.0
    low = 0.0 if successes == 0 else float(scipy_stats.beta.ppf(alpha / 2, successes, n - successes + 1))
    high = 1.0 if successes == n else float(scipy_stats.beta.ppf(1 - alpha / 2, successes + 1, n - successes))
    return low, high


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: under no change each discordant pair is a fair coin."""
    d = b + c
    if d == 0:
        return 1.0
    return float(min(1.0, 2 * scipy_stats.binom.cdf(min(b, c), d, 0.5)))


def tango_score(b: np.ndarray | float, c: np.ndarray | float, n: int, delta: np.ndarray | float) -> np.ndarray:
    """Tango's score statistic for H0: P(after only) - P(before only) = delta (arrays broadcast).

    The nuisance P(before only) is its maximum-likelihood value under H0, the root of 2n q² + B q + C = 0. Decreasing
    in delta, so each end of the interval is one root; ±inf where the variance vanishes (delta = ±1), 0 where the
    numerator does too."""
    b, c, delta = (np.asarray(v, dtype=float) for v in (b, c, delta))
    quad_b = -b - c + (2 * n + b - c) * delta
    quad_c = -b * delta * (1 - delta)
    q = (-quad_b + np.sqrt(np.maximum(quad_b * quad_b - 8 * n * quad_c, 0.0))) / (4 * n)
    variance = n * np.maximum(2 * q + delta * (1 - delta), 0.0)
    numerator = c - b - n * delta
    with np.errstate(divide="ignore", invalid="ignore"):
        score = numerator / np.sqrt(variance)
    return np.where(variance > 0, score, np.where(numerator == 0, 0.0, np.copysign(np.inf, numerator)))


def tango_interval(b: np.ndarray | float, c: np.ndarray | float, n: int,
                   z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """Tango's 95 % score interval for (c - b) / n, by bisection (vectorised: arrays of b and c at once).

    b: tasks solved before only, c: after only, n: tasks. Each end is where the score crosses ±z; the estimate's
    score is 0, so the interval holds it, and it reaches ±1 only when every task flipped (c or b = n)."""
    b, c = np.asarray(b, dtype=float), np.asarray(c, dtype=float)
    estimate = (c - b) / n
    low = _bisect(lambda d: tango_score(b, c, n, d) > z, np.full_like(estimate, -1.0), estimate)
    high = _bisect(lambda d: tango_score(b, c, n, d) >= -z, estimate, np.ones_like(estimate))
    return low, high


def _bisect(left_of_root: Callable[[np.ndarray], np.ndarray], left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The point where a predicate true to the left turns false, within [left, right], elementwise."""
    for _ in range(BISECTIONS):
        middle = (left + right) / 2
        inside = left_of_root(middle)
        left, right = np.where(inside, middle, left), np.where(inside, right, middle)
    return (left + right) / 2


@dataclass(frozen=True)
class PairedDifference:
    """after - before in success rate over the tasks both evals played, with its 95 % interval."""

    tasks: int
    episodes: int
    before: float
    after: float
    difference: float
    low: float
    high: float
    p_value: float
    method: str
    only_before: int = 0  # discordant tasks (one episode each): solved before, not after
    only_after: int = 0
    decided_by: str = "interval"  # "p_value": the exact test decides (its interval is asymptotic; the test is not)

    @property
    def beyond_noise(self) -> bool:
        if self.decided_by == "p_value":
            return self.p_value < ALPHA
        return self.low > 0 or self.high < 0

    @property
    def direction(self) -> str:
        if not self.beyond_noise:
            return "within noise"
        return "better beyond noise" if self.difference > 0 else "worse beyond noise"

    def describe(self) -> str:
        return (f"{self.before:.1%} → {self.after:.1%}: {self.difference:+.1%} "
                f"[{self.low:+.1%}, {self.high:+.1%}] ({self.direction}; {self.method}, {self.tasks} tasks, "
                f"p={self.p_value:.3g})")

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "beyond_noise": self.beyond_noise, "direction": self.direction}


Outcomes = Mapping[str, Sequence[bool]]


def paired_difference(before: Outcomes, after: Outcomes) -> PairedDifference:
    """Paired difference in success between two evals, over the tasks (keys) both played.

    Raises ValueError when the two share no task: a paired comparison of different held-out sets means nothing."""
    keys = sorted(set(before) & set(after))
    if not keys:
        raise ValueError("the two evals share no held-out task: compare evals of the same eval set "
                         "(same env, trainer.eval_tasks and split)")
    pairs = [(list(map(bool, before[k])), list(map(bool, after[k]))) for k in keys]
    episodes = sum(min(len(a), len(b)) for a, b in pairs)
    if all(len(a) == 1 and len(b) == 1 for a, b in pairs):
        return _mcnemar(pairs)
    return _task_bootstrap(pairs, episodes)


def _mcnemar(pairs: list[tuple[list[bool], list[bool]]]) -> PairedDifference:
    """Exact McNemar for the verdict, Tango's score interval for the difference (see the module docstring)."""
    n = len(pairs)
    b = sum(1 for x, y in pairs if x[0] and not y[0])
    c = sum(1 for x, y in pairs if y[0] and not x[0])
    before = sum(x[0] for x, _ in pairs) / n
    after = sum(y[0] for _, y in pairs) / n
    low, high = (float(v) for v in tango_interval(b, c, n))
    return PairedDifference(n, n, before, after, after - before, low, high, mcnemar_exact_p(b, c),
                            "exact McNemar; Tango score interval", only_before=b, only_after=c,
                            decided_by="p_value")


def _task_bootstrap(pairs: list[tuple[list[bool], list[bool]]], episodes: int) -> PairedDifference:
    before = np.array([np.mean(x) if x else 0.0 for x, _ in pairs])
    after = np.array([np.mean(y) if y else 0.0 for _, y in pairs])
    diffs = after - before
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    index = rng.integers(0, len(diffs), size=(BOOTSTRAP_RESAMPLES, len(diffs)))
    resampled = diffs[index].mean(axis=1)
    low, high = (float(v) for v in np.percentile(resampled, [2.5, 97.5]))
    signs = rng.choice((-1.0, 1.0), size=(BOOTSTRAP_RESAMPLES, len(diffs)))
    as_extreme = int((np.abs((signs * diffs).mean(axis=1)) >= abs(diffs.mean()) - 1e-12).sum())
    p_value = (as_extreme + 1) / (BOOTSTRAP_RESAMPLES + 1)  # the observed flip counts too: never 0
    return PairedDifference(len(pairs), episodes, float(before.mean()), float(after.mean()), float(diffs.mean()),
                            low, high, p_value, "paired task bootstrap")


@dataclass(frozen=True)
class SeedDifference:
    """after - before in success between two settings (or methods), each trained once per seed, run i of one
    paired with run i of the other; the interval includes run-to-run variance (see `seed_difference`)."""

    seeds: int
    tasks: int  # task pairs over all seeds (each seed: the tasks both of its runs played)
    episodes: int
    before: float  # mean over seeds of each run's success (task means on the shared tasks)
    after: float
    difference: float
    low: float
    high: float
    p_value: float  # the larger of the t-test's and the hierarchical bootstrap's
    per_seed: tuple[float, ...]  # each seed's after - before
    t_interval: tuple[float, float] | None  # None with one seed
    bootstrap_interval: tuple[float, float]
    sign_flip_p: float  # exact over 2^seeds flips: never below 2 / 2^seeds (0.25 with 3 seeds)
    method: str = SEED_METHOD

    @property
    def beyond_noise(self) -> bool:
        return self.seeds >= MIN_SEEDS and (self.low > 0 or self.high < 0)

    @property
    def direction(self) -> str:
        if self.seeds < MIN_SEEDS:
            return f"no verdict ({self.seeds} seed{'s' if self.seeds != 1 else ''}; need ≥ {MIN_SEEDS})"
        if not self.beyond_noise:
            return "within noise"
        return "better beyond noise" if self.difference > 0 else "worse beyond noise"

    def describe(self) -> str:
        per_seed = " / ".join(f"{d:+.1%}" for d in self.per_seed)
        seeds = f"{self.seeds} training seed{'s' if self.seeds != 1 else ''}"
        return (f"{self.before:.1%} → {self.after:.1%}: {self.difference:+.1%} [{self.low:+.1%}, {self.high:+.1%}] "
                f"({self.direction}; {self.method}, {seeds}: {per_seed}, p={self.p_value:.3g})")

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "beyond_noise": self.beyond_noise, "direction": self.direction}


def seed_difference(before: Sequence[Outcomes], after: Sequence[Outcomes]) -> SeedDifference:
    """after - before over training seeds: run i of `before` paired with run i of `after` (the same seed).

    Each seed's difference is the mean over the tasks both of its runs played of (after - before) task success; the
    estimate is their mean over seeds. The interval is the union of two:
    - a Student t interval on the per-seed differences (seeds - 1 degrees of freedom): it carries run-to-run variance
      with honest width at 3 seeds, where a percentile bootstrap over seeds covers only ~75 % when run-to-run
      variance dominates (3 seeds have 10 distinct resamples, and the plug-in spread is √(2/3) of the sample's; in a
      simulation of 3 seeds × 128 tasks with a run-to-run spread of 8 points the hierarchical bootstrap alone covered
      85 %, the union 96 %);
    - a hierarchical paired bootstrap (seeds with replacement, then each drawn seed's tasks with replacement,
      10,000 resamples, fixed seed): it keeps the interval at least as wide as the eval noise when a few seeds happen
      to agree (the t interval of identical seeds is a point).
    Beyond noise needs ≥ 3 seeds and the union to exclude zero; with 3 seeds the t interval cannot exclude zero when
    the seeds disagree in sign. The p-value is the larger of the t-test's and the bootstrap's (k + 1) / (B + 1), so
    it agrees with the interval (up to the percentile's rounding). The exact sign-flip p over seeds is reported too
    but decides nothing: its floor 2 / 2^seeds (0.25 at 3 seeds, 0.0625 at 5) would need 6 seeds to ever reach 0.05.

    Raises ValueError when the two lists differ in length, are empty, or a seed's two runs share no task."""
    if len(before) != len(after) or not before:
        raise ValueError(f"paired by seed: need the same number of runs on both sides (got {len(before)} and "
                         f"{len(after)}), at least one")
    per_task = [_task_differences(b, a, seed) for seed, (b, a) in enumerate(zip(before, after, strict=True))]
    per_seed = np.array([diffs.mean() for diffs, _, _, _ in per_task])
    seeds, estimate = len(per_seed), float(per_seed.mean())
    resampled = _hierarchical_bootstrap([diffs for diffs, _, _, _ in per_task])
    boot = tuple(float(v) for v in np.percentile(resampled, [2.5, 97.5]))
    at_or_past_zero = min(int((resampled <= 0).sum()), int((resampled >= 0).sum()))
    p_value = min(1.0, 2 * (at_or_past_zero + 1) / (BOOTSTRAP_RESAMPLES + 1))
    t_interval, t_p = _t_interval(per_seed)
    low, high = boot
    if t_interval is not None:
        low, high, p_value = min(low, t_interval[0]), max(high, t_interval[1]), max(p_value, t_p)
    return SeedDifference(
        seeds=seeds, tasks=sum(len(d) for d, _, _, _ in per_task), episodes=sum(e for _, _, _, e in per_task),
        before=float(np.mean([b for _, b, _, _ in per_task])), after=float(np.mean([a for _, _, a, _ in per_task])),
        difference=estimate, low=max(-1.0, low), high=min(1.0, high), p_value=p_value,
        per_seed=tuple(float(d) for d in per_seed), t_interval=t_interval, bootstrap_interval=boot,
        sign_flip_p=_sign_flip_p(per_seed))


def _task_differences(before: Outcomes, after: Outcomes, seed: int) -> tuple[np.ndarray, float, float, int]:
    """One seed: per-task (after - before) success on the tasks both runs played, both runs' success, episodes."""
    keys = sorted(k for k in set(before) & set(after) if len(before[k]) and len(after[k]))
    if not keys:
        raise ValueError(f"seed {seed}: the two runs share no held-out task (compare runs of the same eval set)")
    was = np.array([np.mean(list(map(bool, before[k]))) for k in keys])
    now = np.array([np.mean(list(map(bool, after[k]))) for k in keys])
    episodes = sum(min(len(before[k]), len(after[k])) for k in keys)
    return now - was, float(was.mean()), float(now.mean()), episodes


def _hierarchical_bootstrap(per_task: list[np.ndarray]) -> np.ndarray:
    """The resampled estimates: seeds drawn with replacement, then each drawn seed's tasks with replacement.

    A task resample's mean only needs how often each distinct difference was drawn (a multinomial), so this costs
    resamples × distinct values, not resamples × tasks."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    seeds = len(per_task)
    drawn = rng.integers(0, seeds, size=(BOOTSTRAP_RESAMPLES, seeds))
    slot_means = np.zeros(drawn.shape)
    for seed, diffs in enumerate(per_task):
        hits = drawn == seed
        values, counts = np.unique(diffs, return_counts=True)
        draws = rng.multinomial(len(diffs), counts / len(diffs), size=int(hits.sum()))
        slot_means[hits] = draws @ values / len(diffs)
    return slot_means.mean(axis=1)


def _t_interval(per_seed: np.ndarray) -> tuple[tuple[float, float] | None, float]:
    """Student t 95 % interval of the mean per-seed difference and its two-sided p; (None, 1) with one seed."""
    seeds = len(per_seed)
    if seeds < 2:
        return None, 1.0
    mean, error = float(per_seed.mean()), float(per_seed.std(ddof=1)) / math.sqrt(seeds)
    if error == 0:
        return (mean, mean), (1.0 if mean == 0 else 0.0)
    half = float(scipy_stats.t.ppf(1 - ALPHA / 2, seeds - 1)) * error
    p_value = float(2 * scipy_stats.t.sf(abs(mean) / error, seeds - 1))
    return (mean - half, mean + half), p_value


def _sign_flip_p(per_seed: np.ndarray) -> float:
    """Two-sided sign-flip p of the mean per-seed difference: exact over all 2^seeds flips (Monte Carlo, (k + 1) /
    (B + 1), beyond EXACT_SIGN_FLIPS seeds)."""
    observed = abs(float(per_seed.mean())) - 1e-12
    if len(per_seed) <= EXACT_SIGN_FLIPS:
        signs = np.array(list(itertools.product((-1.0, 1.0), repeat=len(per_seed))))
        return float((np.abs((signs * per_seed).mean(axis=1)) >= observed).mean())
    signs = np.random.default_rng(BOOTSTRAP_SEED).choice((-1.0, 1.0), size=(BOOTSTRAP_RESAMPLES, len(per_seed)))
    as_extreme = int((np.abs((signs * per_seed).mean(axis=1)) >= observed).sum())
    return (as_extreme + 1) / (BOOTSTRAP_RESAMPLES + 1)


def conditional_mapping_interval(b: np.ndarray, c: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The interval this module used before issue 55, kept to show what it got wrong (its exact coverage, docs/
    learning.md): Clopper-Pearson of c / d mapped through d / n (2 pi - 1), d = b + c taken as known."""
    d = b + c
    pi_low = np.where(c == 0, 0.0, scipy_stats.beta.ppf(ALPHA / 2, np.maximum(c, 1), d - c + 1))
    pi_high = np.where(c == d, 1.0, scipy_stats.beta.ppf(1 - ALPHA / 2, c + 1, np.maximum(d - c, 1)))
    return d / n * (2 * pi_low - 1), d / n * (2 * pi_high - 1)


def exact_coverage(interval: Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray]], n: int,
                   before_only: float, after_only: float) -> float:
    """How often `interval(b, c, n)` holds the true difference after_only - before_only: summed exactly over the
    multinomial (b, c, rest) of n tasks, cells below 1e-12 left out (they cannot move the sum by more than ~1e-8)."""
    b, c = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    b, c = b[b + c <= n], c[b + c <= n]
    p = scipy_stats.binom.pmf(b, n, before_only) * scipy_stats.binom.pmf(c, n - b, after_only / (1 - before_only))
    keep = p >= 1e-12
    low, high = interval(b[keep], c[keep], n)
    truth = after_only - before_only
    return float(p[keep][(low <= truth + 1e-12) & (truth - 1e-12 <= high)].sum())


def pairs_needed(gain: float, discordant_share: float, power: float = 0.8) -> int:
    """Held-out tasks an exact-McNemar-sized test needs to see a `gain` (after - before) with `power`, when a share
    `discordant_share` of the tasks differ between the two policies (normal approximation, Connor 1987)."""
    if gain <= 0 or discordant_share <= gain:
        raise ValueError("need 0 < gain < discordant_share")
    z_a, z_b = Z95, float(scipy_stats.norm.ppf(power))
    n = (z_a * math.sqrt(discordant_share) + z_b * math.sqrt(discordant_share - gain ** 2)) ** 2 / gain ** 2
    return int(math.ceil(n))
