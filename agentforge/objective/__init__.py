"""The one algorithm vocabulary, below the algorithms and the learner (verl's `core_algos`, SkyRL's `ppo_utils`).

- `turns`: the flat per-turn batch every advantage is computed on (`TurnBatch`), group statistics, returns.
- `estimators`: advantage estimators by name (`ADVANTAGE_ESTIMATORS`: grpo, gigpo); an `Algorithm` names one.
- `gae`: token-level GAE over an episode's sampled tokens with a critic's values (PPO), and its value targets.
- `policy_loss`: policy-gradient losses by name (`POLICY_LOSSES`: vanilla, gspo, cispo, reinforce).
- `aggregate`, `kl`, `correction`, `loss`: loss aggregation, KL estimators, rollout correction (truncated IS and
  rejection), and the whole objective of one micro-batch.
- `dynamic_sampling`: which groups carry signal (DAPO's filter); the trainer plays the extra rounds.
"""

from __future__ import annotations

from agentforge.objective.aggregate import AGG_MODES, Normalizer, token_weights
from agentforge.objective.correction import CorrectionSpec, mismatch_metrics, rollout_correction
from agentforge.objective.estimators import ADVANTAGE_ESTIMATORS, Advantages
from agentforge.objective.kl import ESTIMATORS, canonical_estimator, kl_estimate
from agentforge.objective.loss import ObjectiveSpec, policy_objective
from agentforge.objective.policy_loss import POLICY_LOSSES, ClipParams, PolicyTerms

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGG_MODES",
    "ESTIMATORS",
    "POLICY_LOSSES",
    "Advantages",
    "ClipParams",
    "CorrectionSpec",
    "Normalizer",
    "ObjectiveSpec",
    "PolicyTerms",
    "canonical_estimator",
    "kl_estimate",
    "mismatch_metrics",
    "policy_objective",
    "rollout_correction",
    "token_weights",
]
