"""DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476; verl's `algorithm.filter_groups`): a group whose
episodes all score the same gives every group-relative advantage 0, so it costs a learner pass and teaches nothing.
Such groups are dropped and more tasks are played, a batch of `trainer.tasks_per_iteration` at a time, until the
batch holds that many groups with signal or `max_rounds` batches have been played (then it trains on the groups it
has, and says so in the metrics; verl raises an error instead).

Signal is judged on the episode return (`metric: return`, what GRPO normalises) or on success (`metric: won`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import numpy as np

from agentforge.rollout.workflow import RolloutResult, RolloutStats
from agentforge.types import Group

METRICS = ("return", "won")


@dataclass(frozen=True)
class DynamicSampling:
    enabled: bool = False
    metric: str = "return"
    max_rounds: int = 4

    @classmethod
    def from_config(cls, section: object) -> DynamicSampling:
        if section is None:
            return cls()
        values = dict(section)  # type: ignore[call-overload]
        return cls(bool(values.get("enabled", False)), str(values.get("metric", "return")),
                   int(values.get("max_rounds", 4)))


def has_signal(group: Group, metric: str) -> bool:
    scores = [t.episode_return if metric == "return" else float(t.won) for t in group.trajectories]
    return len(scores) > 1 and float(np.ptp(scores)) > 1e-9


def merge_stats(stats: Sequence[RolloutStats]) -> RolloutStats:
    merged = RolloutStats()
    for item in stats:
        for f in fields(RolloutStats):
            setattr(merged, f.name, getattr(merged, f.name) + getattr(item, f.name))
    return merged


def play_with_signal(play: Callable[[int], RolloutResult], batch: int, options: DynamicSampling
                     ) -> tuple[RolloutResult, list[Group], dict[str, float]]:
    """Play rounds (`play(round)` plays one batch of tasks) until `batch` groups have signal. Returns the kept
    batch (its stats and hook metrics over all rounds), every group played (for the rollout summary: the policy's
    real success, not the filtered batch's) and the counts."""
    results: list[RolloutResult] = []
    kept: list[Group] = []
    while len(kept) < batch and len(results) < options.max_rounds:
        result = play(len(results))
        results.append(result)
        kept += [g for g in result.groups if has_signal(g, options.metric)]
    played = [g for r in results for g in r.groups]
    metrics = {
        "dynamic/rounds": float(len(results)),
        "dynamic/groups_played": float(len(played)),
        "dynamic/groups_dropped": float(len(played) - len(kept)),
        "dynamic/groups_short": float(max(batch - len(kept), 0)),
    }
    hook_metrics: dict[str, float] = {}
    for key in {k for r in results for k in r.metrics}:
        values = [r.metrics[key] for r in results if key in r.metrics]
        hook_metrics[key] = float(np.mean(values))
    return RolloutResult(kept[:batch], merge_stats([r.stats for r in results]), hook_metrics), played, metrics
