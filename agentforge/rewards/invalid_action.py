"""The invalid-action penalty: a turn the env could not take (no parsable action, an inadmissible one, a reply cut
at max_new_tokens) loses `reward.invalid_penalty` from its reward; `Turn.env_reward` keeps what the env gave."""

from __future__ import annotations

from collections.abc import Sequence

from agentforge.rewards.stages import REWARD_STAGES, RewardStage
from agentforge.types import Trajectory


@REWARD_STAGES.register("invalid_action")
class InvalidActionPenalty(RewardStage):
    name = "invalid_action"

    def __init__(self, penalty: float) -> None:
        self.penalty = float(penalty)

    def score_episodes(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        penalised = turns = 0
        for trajectory in trajectories:
            for turn in trajectory.turns:
                turns += 1
                if not turn.valid:
                    turn.reward -= self.penalty
                    penalised += 1
        return {"invalid_action/penalised_turns": float(penalised),
                "invalid_action/penalty_per_turn": self.penalty * penalised / turns if turns else 0.0}
