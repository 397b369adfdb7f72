"""Policy-gradient losses per token, chosen by name (`learner.loss.policy_loss`); verl's names and semantics.

Each takes the selected loss tokens (flat): the learner's log-probs `logp` (with gradient), the old policy's
`old_logp`, advantages `adv` and `seq` (each token's sequence, 0..S−1), and returns the per-token loss ℓ_t (to be
weighted by the aggregation) plus boolean masks of where each clip bound acted (for metrics). ρ = exp(clamp(logp −
old_logp, ±log_ratio_clamp)).

- vanilla (PPO clip with DAPO's asymmetric bounds and dual clip; Schulman et al. 2017, Yu et al. 2025 arXiv
  2503.14476, Ye et al. 2020 arXiv 1912.09729): ℓ = max(−Aρ, −A·clip(ρ, 1−ε_low, 1+ε_high)); for A < 0 also
  ℓ = min(ℓ, −c·A) (`clip_ratio_c`), so a token whose ratio ran away cannot take a batch's whole gradient.
- gspo (Zheng et al. 2025, arXiv 2507.18071; verl's "GSPO-token" form): s_i = exp(mean_t log ρ_t) over the
  sequence, s_{i,t} = sg(s_i)·π_θ(y_t)/sg(π_θ(y_t)) (value s_i, per-token gradient), ℓ = max(−A s, −A clip(s, 1−ε,
  1+ε)) with its own small ε (paper: 3e-4 / 4e-4). With one advantage per sequence (every turn sample here) its
  gradient equals the sequence-level GSPO's. No dual clip, and its policy term is always aggregated
  seq-mean-token-mean (both as verl: POLICY_AGGREGATION).
- cispo (MiniMax-M1, arXiv 2506.13585): ℓ = −sg(clip(ρ, 1−ε_low, 1+ε_high))·A·log π_θ: the IS weight is clipped and
  detached, so every token keeps a gradient (PPO's clip zeroes it). Default ε_low 10 (no lower bound) and ε_high 0.2,
  verl's example.
- reinforce (alias gpg; Chu et al. 2025 arXiv 2504.02546, "GPG"): ℓ = −A·log π_θ, no ratio and no clip.

A policy loss can also be a plugin: `learner.loss.policy_loss=mypkg.losses:my_loss` (same signature).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from agentforge.registry import Registry


@dataclass(frozen=True)
class ClipParams:
    eps_low: float
    eps_high: float
    clip_ratio_c: float | None = 3.0
    log_ratio_clamp: float = 20.0


@dataclass
class PolicyTerms:
    """ℓ_t per selected token, and where each bound acted (bool per token; None: the loss has no such bound)."""

    loss: torch.Tensor
    clipped_high: torch.Tensor | None = None
    clipped_low: torch.Tensor | None = None
    clipped_dual: torch.Tensor | None = None


PolicyLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, ClipParams], PolicyTerms]
POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss")
ALIASES = {"gpg": "reinforce"}
# (eps_low, eps_high) when the config leaves them null
CLIP_DEFAULTS = {"vanilla": (0.2, 0.28), "gspo": (3e-4, 4e-4), "cispo": (10.0, 0.2), "reinforce": (0.0, 0.0)}
# Losses whose policy term has its own aggregation whatever `loss.agg_mode` says (verl's compute_policy_loss_gspo
# aggregates seq-mean-token-mean: GSPO's ratio is a sequence's, so each sequence counts once); agg_mode still
# aggregates their KL and entropy terms.
POLICY_AGGREGATION = {"gspo": "seq-mean-token-mean"}


def canonical_policy_loss(name: str) -> str:
    return ALIASES.get(str(name), str(name))


def log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, clamp: float) -> torch.Tensor:
    return torch.clamp(logp - old_logp, min=-clamp, max=clamp)


@POLICY_LOSSES.register("vanilla")
def vanilla(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, seq: torch.Tensor,
            p: ClipParams) -> PolicyTerms:
    ratio = torch.exp(log_ratio(logp, old_logp, p.log_ratio_clamp))
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - p.eps_low, 1.0 + p.eps_high)
    loss = torch.maximum(unclipped, clipped)
    negative = adv < 0
    with torch.no_grad():
        high = (adv > 0) & (ratio > 1.0 + p.eps_high)
        low = negative & (ratio < 1.0 - p.eps_low)
    dual = None
    if p.clip_ratio_c is not None:
        bound = -adv * p.clip_ratio_c
        with torch.no_grad():
            dual = negative & (loss > bound)
        loss = torch.where(negative, torch.minimum(loss, bound), loss)
    return PolicyTerms(loss, high, low, dual)


@POLICY_LOSSES.register("gspo")
def gspo(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, seq: torch.Tensor,
         p: ClipParams) -> PolicyTerms:
    count = torch.bincount(seq).to(logp.dtype).clamp(min=1.0)
    seq_log_ratio = torch.zeros(count.shape, dtype=logp.dtype, device=logp.device)
    seq_log_ratio = seq_log_ratio.index_add(0, seq, (logp - old_logp).detach()) / count
    log_s = logp - logp.detach() + seq_log_ratio[seq]
    s = torch.exp(torch.clamp(log_s, min=-p.log_ratio_clamp, max=p.log_ratio_clamp))
    unclipped = -adv * s
    clipped = -adv * torch.clamp(s, 1.0 - p.eps_low, 1.0 + p.eps_high)
    with torch.no_grad():
        high = (adv > 0) & (s > 1.0 + p.eps_high)
        low = (adv < 0) & (s < 1.0 - p.eps_low)
    return PolicyTerms(torch.maximum(unclipped, clipped), high, low)


@POLICY_LOSSES.register("cispo")
def cispo(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, seq: torch.Tensor,
          p: ClipParams) -> PolicyTerms:
    ratio = torch.exp(log_ratio(logp, old_logp, p.log_ratio_clamp)).detach()
    weight = torch.clamp(ratio, 1.0 - p.eps_low, 1.0 + p.eps_high)
    return PolicyTerms(-weight * adv * logp, ratio > 1.0 + p.eps_high, ratio < 1.0 - p.eps_low)


@POLICY_LOSSES.register("reinforce")
def reinforce(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, seq: torch.Tensor,
              p: ClipParams) -> PolicyTerms:
    return PolicyTerms(-adv * logp)
