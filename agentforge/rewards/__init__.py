"""The reward seam: every stage that adds to or takes off the env's rewards, run as one list (`RewardPipeline`),
configured by the `reward` group, logged as `reward/*` and checkpointed with the run."""

from agentforge.rewards.pipeline import RewardPipeline
from agentforge.rewards.stages import REWARD_STAGES, RewardStage

__all__ = ["REWARD_STAGES", "RewardPipeline", "RewardStage"]
