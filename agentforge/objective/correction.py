"""Rollout correction: the engine that sampled (π_e: vLLM, bf16, other kernels) is not the learner's π_old.

With the learner's own old log-probs (`learner.old_logprobs: recompute`) the PPO ratio is taken against π_old, and
the tokens were still sampled from π_e: the importance weight w = π_old / π_e corrects that (Yao et al. 2025, "Your
efficient RL framework secretly brings you off-policy RL training", fengyao.notion.site/off-policy-rl; Liu et al.
2025, "When speed kills stability"; verl's and SkyRL's rollout correction). Two remedies, alone or together:

- TIS (truncated importance sampling): each token's loss is multiplied by min(w, C). `token`: w per token;
  `sequence`: the product of the sequence's token weights (exp of the summed log-ratio, clamped to ±20), one weight
  for every token of the sequence.
- MIS (masked importance sampling / rejection): tokens or whole sequences whose weight leaves [C_low, C_high] are
  dropped from the loss (and from its normalisers). `token`: per token; `sequence`: the product ratio; `geometric`:
  the geometric mean exp(mean log w), which does not grow with length. These bound w = π_old/π_e, verl's names
  before its rollout-correction rework (PR #4511). verl's names since then are accepted too, with verl's meaning:
  `token_k1`, `seq_sum_k1`, `seq_mean_k1` bound the inverse ratio π_e/π_old (the k1 statistic log π_e − log π_old),
  each token's log-ratio clamped to ±20 before the sum or mean. With symmetric bounds (C_low = 1/C_high, the
  default) the two spellings keep the same tokens (up to the clamp); with asymmetric ones they differ.

A rejected sequence leaves the loss and its normalisers: under the seq-mean modes the mean is over the kept
sequences (verl's worker divides by the batch's nominal size instead). A turn the engine sampled far off the
learner says nothing about the kept ones, so it should not shrink their step: the update's size then does not depend
on how many turns were rejected, as token-mean's does not depend on how many tokens were (its mean is over kept
tokens in both).

Everything here is data prepared once per update, before the first optimizer step (numpy, per sample).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IS_LEVELS = ("token", "sequence")
REJECTION_LEVELS = ("token", "sequence", "geometric")
# verl's names since PR #4511 -> the level they reject at; their bounds are on π_e/π_old (the inverse of the above)
K1_REJECTION = {"token_k1": "token", "seq_sum_k1": "sequence", "seq_mean_k1": "geometric"}
LOG_RATIO_CLAMP = 20.0


@dataclass(frozen=True)
class CorrectionSpec:
    is_level: str | None = None
    is_threshold: float = 2.0
    rejection: str | None = None
    rejection_low: float = 0.5
    rejection_high: float = 2.0

    @property
    def active(self) -> bool:
        return self.is_level is not None or self.rejection is not None


@dataclass
class Correction:
    """Per-sample results: `weights` (float32 per response token, or None) and `keep` (bool per response token)."""

    weights: list[np.ndarray | None]
    keep: list[np.ndarray]
    metrics: dict[str, float]


def mismatch_metrics(learner: list[np.ndarray], engine: list[np.ndarray], masks: list[np.ndarray]
                     ) -> dict[str, float]:
    """Engine vs learner on the loss tokens: k3 of KL(π_old ‖ π_e) estimated at π_e's samples, max |Δ log p|, and
    the token IS weight's mean and max before any truncation."""
    d = np.concatenate([(lp - ep)[m] for lp, ep, m in zip(learner, engine, masks, strict=True)]) if masks else \
        np.zeros(0)
    if not len(d):
        return {}
    d = d.astype(np.float64)
    w = np.exp(np.clip(d, -20, 20))
    return {
        "rollout/mismatch_k3": float(np.mean(w - d - 1.0)),
        "rollout/mismatch_abs_mean": float(np.mean(np.abs(d))),
        "rollout/mismatch_abs_max": float(np.max(np.abs(d))),
        "rollout/is_weight_mean": float(w.mean()),
        "rollout/is_weight_max": float(w.max()),
    }


def rejection_keep(d: np.ndarray, m: np.ndarray, spec: CorrectionSpec) -> np.ndarray:
    """Which tokens MIS keeps, from d = log π_old − log π_e per token (0 off the loss tokens `m`)."""
    n = int(m.sum())
    k1 = K1_REJECTION.get(str(spec.rejection))
    if k1 is not None:  # verl's k1 names: bounds on π_e/π_old in log space, each token's log-ratio clamped first
        r = np.where(m, np.clip(-d, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), 0.0)
        low, high = np.log(spec.rejection_low), np.log(spec.rejection_high)
        if k1 == "token":
            return (r >= low) & (r <= high)
        stat = r.sum() if k1 == "sequence" else r.sum() / n
        return np.full(d.shape, bool(low <= stat <= high))
    if spec.rejection == "token":
        w_tok = np.exp(np.clip(d, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        return (w_tok >= spec.rejection_low) & (w_tok <= spec.rejection_high)
    level = d.sum() if spec.rejection == "sequence" else d.sum() / n
    w_seq = float(np.exp(np.clip(level, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)))
    return np.full(d.shape, spec.rejection_low <= w_seq <= spec.rejection_high)


def rollout_correction(learner: list[np.ndarray], engine: list[np.ndarray], masks: list[np.ndarray],
                       spec: CorrectionSpec) -> Correction:
    """IS weights and rejection masks for each sample's response tokens (`masks`: its loss tokens)."""
    weights: list[np.ndarray | None] = []
    keep: list[np.ndarray] = []
    truncated = tokens = rejected_tokens = rejected_seqs = seqs = 0
    for lp, ep, m in zip(learner, engine, masks, strict=True):
        d = np.where(m, lp.astype(np.float64) - ep.astype(np.float64), 0.0)
        n = int(m.sum())
        kept = m.copy()
        if spec.rejection and n:
            kept &= rejection_keep(d, m, spec)
            rejected_tokens += int(n - kept.sum())
            rejected_seqs += int(n > 0 and not kept.any())
        seqs += int(n > 0)
        tokens += n
        keep.append(kept)
        if spec.is_level is None:
            weights.append(None)
            continue
        if spec.is_level == "token":
            w = np.exp(np.clip(d, -20, 20))
        else:
            w = np.full(d.shape, np.exp(np.clip(d.sum(), -20, 20)))
        truncated += int((w[kept] > spec.is_threshold).sum())
        weights.append(np.minimum(w, spec.is_threshold).astype(np.float32))
    metrics = {}
    if spec.is_level is not None:
        metrics["rollout/is_truncated_fraction"] = truncated / max(tokens - rejected_tokens, 1)
    if spec.rejection is not None:
        metrics["rollout/rejected_token_fraction"] = rejected_tokens / max(tokens, 1)
        metrics["rollout/rejected_sequence_fraction"] = rejected_seqs / max(seqs, 1)
    return Correction(weights, keep, metrics)
