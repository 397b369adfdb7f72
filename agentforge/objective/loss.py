"""The whole policy objective of one micro-batch: policy loss, rollout-correction weights, aggregation, KL, entropy.

Tokens that carry no loss (prompt, padding, forced or rejected tokens) are *selected out* before anything is
computed, never multiplied by 0: a non-finite old log-prob, reference log-prob or weight on such a token cannot
reach the loss (0 · inf is NaN).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentforge.objective.aggregate import Normalizer, aggregate, token_weights
from agentforge.objective.kl import k3, kl_estimate
from agentforge.objective.policy_loss import POLICY_AGGREGATION, POLICY_LOSSES, ClipParams


@dataclass(frozen=True)
class ObjectiveSpec:
    """The resolved loss options (LossSettings with the policy loss's defaults filled in)."""

    policy_loss: str = "vanilla"
    clip: ClipParams = ClipParams(0.2, 0.28)
    agg_mode: str = "token-mean"  # every term's, except a policy term with its own (POLICY_AGGREGATION: GSPO)
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_clamp: float = 10.0
    kl_in_loss: bool = True
    entropy_coef: float = 0.0


def policy_objective(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    seq: torch.Tensor,
    spec: ObjectiveSpec,
    norm: Normalizer | None = None,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    is_weights: torch.Tensor | None = None,
    strata: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss and metrics over the tokens where `mask` is True.

    All per-token inputs are flat [N] and aligned; `seq` gives each token's sequence (any integer ids). `norm` holds
    the whole mini-batch's denominators (see `aggregate`); None: this call is the whole batch. Metrics are means
    over this call's selected tokens: `pg_loss` (the token mean of ℓ), `clip_fraction` (PPO's two bounds),
    `clip_fraction_low`/`_high`/`_dual`, `approx_kl` (k3 between new and old), `logprob_abs_diff` (|logp − old|),
    and when given `kl_ref` (the chosen estimator to the reference), `entropy`, `is_weight`. `strata` (per token,
    -1 for none) adds raw counts per stratum s ≥ 0, `count/clipped_stratum_<s>` and `count/tokens_stratum_<s>`:
    counts, not means, so callers sum them over micro-batches, steps and ranks.
    """
    for name, tensor in (("old_logp", old_logp), ("advantages", advantages), ("mask", mask), ("seq", seq),
                         ("ref_logp", ref_logp), ("entropy", entropy), ("is_weights", is_weights), ("strata", strata)):
        if tensor is not None and tensor.shape != logp.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)} but logp has {tuple(logp.shape)}; pass one "
                             "value per token, aligned with logp")
    index = mask.nonzero(as_tuple=True)[0]
    pick = lambda t: None if t is None else t[index]  # noqa: E731
    logp = logp[index].float()
    old, adv = old_logp[index].detach().float(), advantages[index].detach().float()
    _, local_seq = torch.unique(seq[index], return_inverse=True)
    count = int(index.numel())
    if norm is None:
        norm = Normalizer(max(count, 1), float(local_seq.unique().numel()) if count else 1.0, 1.0)
    weights = token_weights(spec.agg_mode, local_seq, norm) if count else logp.new_zeros(0)
    policy_mode = POLICY_AGGREGATION.get(spec.policy_loss, spec.agg_mode)
    policy_weights = weights if policy_mode == spec.agg_mode or not count else \
        token_weights(policy_mode, local_seq, norm)

    terms = POLICY_LOSSES.get(spec.policy_loss)(logp, old, adv, local_seq, spec.clip)
    token_loss = terms.loss
    weight = pick(is_weights)
    if weight is not None:
        token_loss = token_loss * weight.detach().float()
    loss = aggregate(token_loss, policy_weights)

    kl_ref = None
    if ref_logp is not None:
        kl_ref = kl_estimate(logp, pick(ref_logp).detach().float(), spec.kl_estimator, spec.kl_clamp)
        if spec.kl_coef and spec.kl_in_loss:
            loss = loss + spec.kl_coef * aggregate(kl_ref, weights)
    ent = pick(entropy)
    if ent is not None and spec.entropy_coef:
        loss = loss - spec.entropy_coef * aggregate(ent.float(), weights)

    with torch.no_grad():
        def mean(values: torch.Tensor | None) -> float:
            return float(values.float().mean()) if values is not None and count else 0.0

        high, low, dual = terms.clipped_high, terms.clipped_low, terms.clipped_dual
        either = high | low if high is not None and low is not None else None
        metrics = {
            "pg_loss": mean(token_loss.detach()),
            "clip_fraction": mean(either),
            "clip_fraction_low": mean(low),
            "clip_fraction_high": mean(high),
            "clip_fraction_dual": mean(dual),
            "approx_kl": mean(k3(old - logp.detach())),
            "logprob_abs_diff": mean((logp.detach() - old).abs()),
        }
        if kl_ref is not None:
            metrics["kl_ref"] = mean(kl_ref.detach())
        if ent is not None:
            metrics["entropy"] = mean(ent)
        if weight is not None:
            metrics["is_weight"] = mean(weight)
        if strata is not None and count:
            metrics.update(stratum_clip_counts(pick(strata), either))
    return loss, metrics


def stratum_clip_counts(strata: torch.Tensor, clipped: torch.Tensor | None) -> dict[str, float]:
    """Clipped and total token counts per stratum s ≥ 0 (e.g. the version lag of asynchronous training)."""
    out: dict[str, float] = {}
    for s in (int(v) for v in strata.unique()):
        if s < 0:
            continue
        members = strata == s
        out[f"count/tokens_stratum_{s}"] = float(members.sum())
        out[f"count/clipped_stratum_{s}"] = float((clipped & members).sum()) if clipped is not None else 0.0
    return out
