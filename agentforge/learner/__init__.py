"""The learner: turn samples packed into token-bounded micro-batches, trained by DeepSpeed ranks (Ray actors or
in-process), LoRA through peft, weight export for the rollout engine, and checkpoints."""

from __future__ import annotations

from agentforge.learner.batch import TurnSample, samples_from_groups, samples_from_sft
from agentforge.learner.config import LearnerConfig, LoraSettings, LossSettings
from agentforge.learner.driver import Learner
from agentforge.learner.packing import pack_micro_batches, shard_by_tokens

__all__ = [
    "Learner",
    "LearnerConfig",
    "LoraSettings",
    "LossSettings",
    "TurnSample",
    "pack_micro_batches",
    "samples_from_groups",
    "samples_from_sft",
    "shard_by_tokens",
]

