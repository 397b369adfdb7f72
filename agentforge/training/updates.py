"""Which iterations changed the policy: the weight version, and the iterations that trained nothing.

A weight version is one push of new weights: an update the learner refuses (non-finite advantages, loss or
gradient) or a batch with nothing to train pushes nothing, so it makes no version. Asynchronous training labels each
turn with the version that sampled it and measures staleness against the learner's version, so counting versions by
iterations instead would call every later turn one version staler than it is per refused update (and drop fresh
groups as beyond the bound). The ledger is part of each checkpoint, so versions and the record of untrained
iterations continue across a resume.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("agentforge.training.trainer")

# Iterations in a row without an update after which the run says so loudly (and again every as many more).
STALL_ITERATIONS = 3


@dataclass
class UpdateLedger:
    version: int = 0  # weight versions made by RL updates (pushes); the learner version asynchronous training uses
    untrained: list[int] = field(default_factory=list)  # 1-based iterations that trained nothing
    streak: int = 0  # of those, how many in a row up to the last iteration recorded

    def record(self, iteration: int, updated: bool) -> str | None:
        """Iteration `iteration` (1-based) updated the policy or not; returns the warning to show when the run has
        now trained nothing for STALL_ITERATIONS iterations in a row (or a multiple)."""
        if updated:
            self.version += 1
            self.streak = 0
            return None
        self.untrained.append(iteration)
        self.streak += 1
        if self.streak % STALL_ITERATIONS:
            return None
        message = (f"iterations {iteration - self.streak + 1}-{iteration}: {self.streak} iterations in a row trained "
                   "nothing (every update skipped or empty): the policy is not changing. The skip lines above "
                   "name the cause (non-finite values, no trained turn, all groups dropped as too stale)")
        log.warning(message)
        return message

    def metrics(self) -> dict[str, float]:
        return {"train/iterations_without_update": float(self.streak), "train/weight_version": float(self.version)}

    def summary_line(self, iterations: int) -> str | None:
        """The run summary's line when some iteration trained nothing (None when every one did)."""
        if not self.untrained:
            return None
        shown = ", ".join(map(str, self.untrained[:20])) + (", ..." if len(self.untrained) > 20 else "")
        return f"{len(self.untrained)} of {iterations} iterations trained nothing (iterations {shown})"

    def state_dict(self) -> dict[str, Any]:
        return {"weight_version": self.version, "untrained_iterations": list(self.untrained),
                "untrained_streak": self.streak}

    def load_state_dict(self, state: dict[str, Any], iteration: int) -> None:
        """From a checkpoint's trainer state; one written before versions were counted by pushes counted one per
        iteration (`iteration`: the checkpoint's)."""
        self.version = int(state.get("weight_version", iteration))
        self.untrained = [int(i) for i in state.get("untrained_iterations", [])]
        self.streak = int(state.get("untrained_streak", 0))
