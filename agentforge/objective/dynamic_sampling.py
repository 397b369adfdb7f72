"""DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476; verl's `algorithm.filter_groups`): a group whose
episodes all score the same gives every group-relative advantage 0, so it costs a learner pass and teaches nothing.
Such groups are dropped and more tasks are played, a batch of `trainer.tasks_per_iteration` at a time, until the
batch holds that many groups with signal or `max_rounds` batches have been played (then it trains on the groups it
has, and says so in the metrics; verl raises an error instead).

Signal is judged on the episode return (`metric: return`, what GRPO normalises) or on success (`metric: won`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
