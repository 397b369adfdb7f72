"""The token-level clipped policy loss every algorithm trains with (DAPO-style asymmetric clip, optional k3 KL)."""

from __future__ import annotations

import torch

from agentforge.errors import ConfigError


def k3_kl(log_ratio: torch.Tensor) -> torch.Tensor:
    """Low-variance KL estimator per token: exp(d) − d − 1 with d = log q − log p (≥ 0, 0 when equal)."""
    return torch.exp(log_ratio) - log_ratio - 1.0


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    num_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """L = −mean_tokens min(ρA, clip(ρ, 1−ε_low, 1+ε_high)A) [+ β·mean k3(ref‖θ)] [− c_H·mean H].

    All per-token tensors share one shape (e.g. [batch, tokens]); `advantages` may also have one value per
    sequence (shape without the last dim), broadcast over its tokens. `mask` is 1 on response tokens that carry
    loss (0 on prompt, padding and forced tokens). The mean is over masked tokens of this call (DAPO token-level);
    pass `num_tokens` (the mini-batch's masked token count, at least 1) to divide by it instead when gradients are
    accumulated over micro-batches. `old_logp` are the rollout engine's log-probs (so ρ = 1 on the first step of a
    single-update batch). The KL term uses k3 = exp(ref − logp) − (ref − logp) − 1.

    Metrics (floats, means over this call's masked tokens): `pg_loss`, `clip_fraction` (tokens whose gradient
    the clip removes; also split as `clip_fraction_low`/`clip_fraction_high`), `approx_kl` (k3 between the new
    and old policy), `logprob_abs_diff` (mean |logp − old_logp|: the engine/learner mismatch on the first step),
    and, when given, `kl_ref` (k3 to the reference) and `entropy`.
    """
    if not 0.0 <= eps_low < 1.0 or eps_high < 0.0:
        raise ConfigError(f"clip bounds eps_low={eps_low}, eps_high={eps_high} must satisfy 0 <= eps_low < 1 and "
                          "eps_high >= 0")
    if kl_coef and ref_logp is None:
        raise ConfigError(f"kl_coef={kl_coef} needs reference log-probs; enable the reference model or set kl_coef=0")
    if entropy_coef and entropy is None:
        raise ConfigError(f"entropy_coef={entropy_coef} needs per-token entropies; pass them or set entropy_coef=0")
    _check_shape("old_logp", old_logp, logp)
    _check_shape("mask", mask, logp)
    if advantages.dim() == logp.dim() - 1:
        advantages = advantages.unsqueeze(-1)
    if advantages.shape[:-1] != logp.shape[:-1] or advantages.shape[-1] not in (1, logp.shape[-1]):
        raise ValueError(f"advantages shape {tuple(advantages.shape)} fits neither the tokens {tuple(logp.shape)} "
                         "nor one value per sequence")

    logp = logp.float()
    old_logp = old_logp.detach().float()
    advantages = advantages.detach().float()
    weights = mask.to(logp.dtype)
    count = weights.sum().clamp(min=1.0)
    denominator: torch.Tensor | float = count if num_tokens is None else max(float(num_tokens), 1.0)

    def token_mean(values: torch.Tensor, over: torch.Tensor | float = denominator) -> torch.Tensor:
        return (values * weights).sum() / over

    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    pg_loss = token_mean(-torch.minimum(unclipped, clipped))
    loss = pg_loss
    kl_ref = None
    if ref_logp is not None:
        _check_shape("ref_logp", ref_logp, logp)
        kl_ref = token_mean(k3_kl(ref_logp.detach().float() - logp))
        if kl_coef:
            loss = loss + kl_coef * kl_ref
    mean_entropy = None
    if entropy is not None:
        _check_shape("entropy", entropy, logp)
        mean_entropy = token_mean(entropy.float())
        if entropy_coef:
            loss = loss - entropy_coef * mean_entropy

    with torch.no_grad():
        high = (advantages > 0) & (ratio > 1.0 + eps_high)
        low = (advantages < 0) & (ratio < 1.0 - eps_low)
        scale = denominator / count  # metrics are means over this call's tokens, whatever the loss divides by
        names = ["pg_loss", "clip_fraction", "clip_fraction_low", "clip_fraction_high", "approx_kl",
                 "logprob_abs_diff"]
        values = [
            pg_loss.detach() * scale,
            token_mean((high | low).float(), count),
            token_mean(low.float(), count),
            token_mean(high.float(), count),
            token_mean(k3_kl(old_logp - logp.detach()), count),
            token_mean(log_ratio.detach().abs(), count),
        ]
        if kl_ref is not None:
            names.append("kl_ref")
            values.append(kl_ref.detach() * scale)
        if mean_entropy is not None:
            names.append("entropy")
            values.append(mean_entropy.detach() * scale)
        metrics = dict(zip(names, torch.stack(values).tolist(), strict=True))
    return loss, metrics


def _check_shape(name: str, tensor: torch.Tensor, like: torch.Tensor) -> None:
    if tensor.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)} but logp has {tuple(like.shape)}; "
                         "pass one value per token, aligned with logp")
