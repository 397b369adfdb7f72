"""A reward stage and its registry.

A stage scores finished episodes (`score_episodes`: every workflow calls it once per run, when all its episodes have
ended and before the algorithm's `after_episodes` hook, for training, eval and `agentforge rollout` alike) or the
training samples (`score_samples`: after the learner has prepared them, before advantages; what needs the learner's
log-probs, such as KL in the reward). Each returns metrics (logged under `reward/`) and may keep state that is
checkpointed with the run (`state_dict`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from agentforge.registry import Registry
from agentforge.types import Span, Trajectory, Turn


class RewardStage:
    """Base class: a no-op in both phases; a stage overrides the phase it acts in."""

    name: ClassVar[str] = ""
    needs_reference: ClassVar[bool] = False  # the learner must keep the reference policy's log-probs

    def score_episodes(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """Change the turns' rewards of finished episodes in place; metrics without the `reward/` prefix."""
        return {}

    def score_samples(self, samples: Sequence[Any], owners: Sequence[Turn | Span]) -> dict[str, float]:
        """Change the owners' rewards from the prepared training samples (`samples[i]` came from `owners[i]`)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` on resume."""


REWARD_STAGES: Registry[type[RewardStage]] = Registry("reward stage")
