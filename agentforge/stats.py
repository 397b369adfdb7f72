"""Rates and paired differences with 95 % intervals: the statistics every eval table and verdict uses.

It stands at the ground floor (imports nothing of agentforge; evaluation/__init__ holds only a docstring), so
summaries, plots, eval reports and sweep reports share one definition.

Why paired: two evals of the same held-out tasks with the same sampling seeds share most of their variance (an easy
room is solved by both policies). Comparing two independent Wilson intervals throws that away and needs ~2× the
tasks to see the same gain; a paired test looks only at the tasks on which the two policies differ.

- one episode per task (the default eval): the **exact McNemar test** on the discordant pairs (b: solved before only,
  c: after only) and, for the difference in success (c - b) / n, the interval that conditions on the number of
  discordant pairs d = b + c: the Clopper-Pearson interval of c / d mapped through d / n * (2 pi - 1). Exact, valid
  at small counts (no normal approximation), and it excludes zero exactly when the exact test's interval on c / d
  excludes 1/2.
- several episodes per task (eval_group_size > 1): episodes of one task are not independent, so the task is the unit:
  a **paired bootstrap over tasks** (10,000 resamples, fixed seed: the same data give the same interval), percentile
  interval, and a sign-flip permutation p-value over the per-task differences.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as scipy_stats

Z95 = 1.959964
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20_261_203


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

    @property
    def beyond_noise(self) -> bool:
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
    n = len(pairs)
    b = sum(1 for x, y in pairs if x[0] and not y[0])
    c = sum(1 for x, y in pairs if y[0] and not x[0])
    before = sum(x[0] for x, _ in pairs) / n
    after = sum(y[0] for _, y in pairs) / n
    d = b + c
    if d == 0:
        low = high = 0.0
    else:
        pi_low, pi_high = clopper_pearson(c, d)
        low, high = d / n * (2 * pi_low - 1), d / n * (2 * pi_high - 1)
    return PairedDifference(n, n, before, after, after - before, low, high, mcnemar_exact_p(b, c),
                            "exact McNemar", only_before=b, only_after=c)


def _task_bootstrap(pairs: list[tuple[list[bool], list[bool]]], episodes: int) -> PairedDifference:
    before = np.array([np.mean(x) if x else 0.0 for x, _ in pairs])
    after = np.array([np.mean(y) if y else 0.0 for _, y in pairs])
    diffs = after - before
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    index = rng.integers(0, len(diffs), size=(BOOTSTRAP_RESAMPLES, len(diffs)))
    resampled = diffs[index].mean(axis=1)
    low, high = (float(v) for v in np.percentile(resampled, [2.5, 97.5]))
    signs = rng.choice((-1.0, 1.0), size=(BOOTSTRAP_RESAMPLES, len(diffs)))
    observed = abs(diffs.mean())
    p_value = float((np.abs((signs * diffs).mean(axis=1)) >= observed - 1e-12).mean()) if observed > 0 else 1.0
    return PairedDifference(len(pairs), episodes, float(before.mean()), float(after.mean()), float(diffs.mean()),
                            low, high, p_value, "paired task bootstrap")


def pairs_needed(gain: float, discordant_share: float, power: float = 0.8) -> int:
    """Held-out tasks an exact-McNemar-sized test needs to see a `gain` (after - before) with `power`, when a share
    `discordant_share` of the tasks differ between the two policies (normal approximation, Connor 1987)."""
    if gain <= 0 or discordant_share <= gain:
        raise ValueError("need 0 < gain < discordant_share")
    z_a, z_b = Z95, float(scipy_stats.norm.ppf(power))
    n = (z_a * math.sqrt(discordant_share) + z_b * math.sqrt(discordant_share - gain ** 2)) ** 2 / gain ** 2
    return int(math.ceil(n))
