"""The run's reward stages as one list, built from the `reward` config group, in a fixed order: the
invalid-action penalty and the judge on finished episodes, then KL in the reward on the training samples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentforge.rewards.stages import RewardStage
from agentforge.schema.groups import RewardSchema
from agentforge.types import Span, Trajectory, Turn

EPISODES_SCORED = "reward_stages"  # Trajectory.meta key: the stages that scored it (each scores an episode once)


class RewardPipeline:
    """`score_episodes(trajectories)` and `score_samples(samples, owners)` run every stage of that phase in order;
    an episode is scored once however often it is passed (a resumed batch, a replayed group)."""

    def __init__(self, stages: Sequence[RewardStage]) -> None:
        self.stages = list(stages)

    @classmethod
    def from_settings(cls, settings: RewardSchema, engine: Any = None) -> RewardPipeline:
        """The stages `settings` turn on; `engine`: the rollout engine, for a judge that is the engine's model."""
        from agentforge.rewards.invalid_action import InvalidActionPenalty

        stages: list[RewardStage] = [InvalidActionPenalty(settings.invalid_penalty)]
        if settings.judge.enabled:
            from agentforge.rewards.judge import make_judge

            stages.append(make_judge(settings.judge, engine))
        kl = settings.kl
        if kl.coef > 0:
            from agentforge.rewards.kl import KLInReward

            stages.append(KLInReward(kl.coef, kl.estimator, kl.clamp, kl.target, kl.horizon))
        return cls(stages)

    @property
    def needs_reference(self) -> bool:
        return any(stage.needs_reference for stage in self.stages)

    def score_episodes(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        fresh = [t for t in trajectories if EPISODES_SCORED not in t.meta]
        metrics: dict[str, float] = {}
        for stage in self.stages:
            metrics.update({f"reward/{k}": v for k, v in stage.score_episodes(fresh).items()})
        for trajectory in fresh:
            trajectory.meta[EPISODES_SCORED] = [stage.name for stage in self.stages]
        return metrics

    def score_samples(self, samples: Sequence[Any], owners: Sequence[Turn | Span]) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for stage in self.stages:
            metrics.update({f"reward/{k}": v for k, v in stage.score_samples(samples, owners).items()})
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {stage.name: state for stage in self.stages if (state := stage.state_dict())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for stage in self.stages:
            if stage.name in state:
                stage.load_state_dict(state[stage.name])
