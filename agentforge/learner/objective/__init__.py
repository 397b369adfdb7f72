"""The policy objective: named policy losses, loss aggregation, KL estimators and rollout correction."""

from __future__ import annotations

from agentforge.learner.objective.aggregate import AGG_MODES, Normalizer, token_weights
from agentforge.learner.objective.correction import CorrectionSpec, mismatch_metrics, rollout_correction
from agentforge.learner.objective.kl import ESTIMATORS, canonical_estimator, kl_estimate
from agentforge.learner.objective.loss import ObjectiveSpec, policy_objective
from agentforge.learner.objective.policy import POLICY_LOSSES, ClipParams, PolicyTerms

__all__ = [
    "AGG_MODES",
    "ESTIMATORS",
    "POLICY_LOSSES",
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
