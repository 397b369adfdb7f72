"""Per-token KL estimators between the policy and the reference (Schulman, "Approximating KL divergence", 2020).

For a token sampled from π_θ with d = log π_θ − log π_ref:
  k1 = d (unbiased, can be negative), k2 = d²/2 ("mse"; its gradient is the unbiased KL gradient),
  k3 = exp(−d) + d − 1 ("low_var_kl": unbiased, ≥ 0, low variance), abs = |d|.
A trailing "+" keeps the estimator's value but takes k2's gradient (straight-through), as verl does: k1 and k3
estimate KL's value without bias but not its gradient. verl's names (kl, mse, low_var_kl) are accepted.
As in verl, k3 is computed from −d clamped to ±20 and its value clamped to ±`clamp` (default 10); the others are
not clamped.
"""

from __future__ import annotations

import torch

ESTIMATORS = ("k1", "k2", "k3", "abs", "k1+", "k3+", "abs+")
ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3", "kl+": "k1+", "low_var_kl+": "k3+", "k2+": "k2",
           "mse+": "k2"}


def canonical_estimator(name: str) -> str:
    """The estimator's canonical name (k1, k2, k3, abs, or a "+" form); ValueError for an unknown one."""
    canonical = ALIASES.get(str(name), str(name))
    if canonical not in ESTIMATORS:
        raise ValueError(f"unknown KL estimator {name!r}; use one of {', '.join(ESTIMATORS)} "
                         f"(verl's names {', '.join(ALIASES)} are accepted too)")
    return canonical


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3", clamp: float = 10.0
                ) -> torch.Tensor:
    """Per-token estimate of KL(π_θ ‖ π_ref) at tokens sampled from π_θ; gradients flow through `logp`."""
    name = canonical_estimator(estimator)
    base = name.rstrip("+")
    d = logp - ref_logp
    if base == "k1":
        value = d
    elif base == "abs":
        value = d.abs()
    elif base == "k2":
        value = 0.5 * d.square()
    else:
        neg = torch.clamp(-d, min=-20.0, max=20.0)
        value = torch.clamp(torch.exp(neg) - neg - 1.0, min=-clamp, max=clamp)
    if not name.endswith("+"):
        return value
    k2 = 0.5 * d.square()
    return k2 - k2.detach() + value.detach()


def k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """exp(r) − r − 1 for r = log q − log p: the k3 value of KL(p ‖ q) at samples of p (≥ 0, 0 when equal)."""
    return torch.exp(log_ratio) - log_ratio - 1.0
