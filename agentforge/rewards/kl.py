"""KL in the reward (`reward.kl.coef`; verl's `use_kl_in_reward`): β·KL(π ‖ π_ref) of each trained env
turn, summed over its tokens, is subtracted from the turn's reward before the algorithm computes advantages, so the
penalty enters episode returns (GRPO) and discounted step returns (GiGPO) like any reward.

β is fixed, or adaptive with a target KL (Ziegler et al. 2019, arXiv 1909.08593; verl's `AdaptiveKLController`):
after each batch β ← β·(1 + clip(KL/target − 1, −0.2, 0.2)·n/horizon), with KL the batch's mean over turns of each
turn's per-token mean estimate and n the number of turns. Trained spans outside the env turns (StraTA's strategies)
keep the rewards their algorithm gives them: their advantages do not come from turn rewards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from agentforge.learner.batch import TurnSample
from agentforge.objective.kl import kl_estimate
from agentforge.rewards.stages import REWARD_STAGES, RewardStage
from agentforge.types import Span, Turn


@REWARD_STAGES.register("kl")
class KLInReward(RewardStage):
    """Applies and adapts the KL penalty; its β is part of the run's checkpointed state. Logged as `reward/kl/coef`
    (β used on this batch), `reward/kl/mean` (the batch's per-token KL) and `reward/kl/penalty_mean` (per turn)."""

    name = "kl"
    needs_reference = True

    def __init__(self, coef: float, estimator: str = "k3", clamp: float = 10.0, target: float | None = None,
                 horizon: int = 10000) -> None:
        self.value = float(coef)
        self.estimator, self.clamp = estimator, float(clamp)
        self.target, self.horizon = target, int(horizon)

    def score_samples(self, samples: Sequence[TurnSample], owners: Sequence[Turn | Span]) -> dict[str, float]:
        """Subtract β·KL from each turn owner's reward (samples need `ref_logprobs`: `Learner.prepare`)."""
        per_token_means, penalties = [], []
        beta = self.value
        for sample, owner in zip(samples, owners, strict=True):
            if not isinstance(owner, Turn) or sample.ref_logprobs is None or not sample.num_loss_tokens:
                continue
            mask = sample.loss_mask
            kl = kl_estimate(torch.from_numpy(sample.old_logprobs[mask]).double(),
                             torch.from_numpy(sample.ref_logprobs[mask]).double(), self.estimator, self.clamp).numpy()
            penalty = beta * float(kl.sum())
            owner.reward -= penalty
            penalties.append(penalty)
            per_token_means.append(float(kl.mean()))
        current = float(np.mean(per_token_means)) if per_token_means else 0.0
        metrics = {"kl/coef": beta, "kl/mean": current,
                   "kl/penalty_mean": float(np.mean(penalties)) if penalties else 0.0}
        if self.target is not None and per_token_means:
            error = float(np.clip(current / self.target - 1.0, -0.2, 0.2))
            self.value *= 1.0 + error * len(per_token_means) / self.horizon
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "value" in state:
            self.value = float(state["value"])
