"""Dynamic sampling's rounds (`objective.dynamic_sampling` says which groups carry signal): play batches of tasks
until the iteration's batch holds enough groups with signal, or the rounds run out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields

import numpy as np

from agentforge.objective.dynamic_sampling import DynamicSampling, has_signal
from agentforge.rollout.workflow import RolloutResult, RolloutStats
from agentforge.types import Group


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
