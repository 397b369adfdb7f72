"""How per-token loss terms become one scalar (`loss_agg_mode`, verl's names), invariant to how a mini-batch is cut.

A "sequence" is one turn sample (a turn's response, or a trained span such as a strategy): the unit per-turn
agentic training optimises. Every mode is a weighted token sum Σ_t w_t ℓ_t with weights from the *whole*
mini-batch (all micro-batches, all ranks), so splitting the batch into micro-batches or ranks cannot change the
gradient; a sequence never straddles two micro-batches, so its own token count is always local:

  token-mean               w = 1 / T                       (T: loss tokens of the mini-batch)
  seq-mean-token-mean      w = 1 / (S · n_i)               (S: sequences with a loss token, n_i: its tokens)
  seq-mean-token-sum       w = 1 / S
  seq-mean-token-sum-norm  w = 1 / (S · L)                 (L: `loss_scale_factor`, a constant, e.g. the budget)

The last is Dr. GRPO's (Liu et al. 2025, arXiv 2503.20783): mean over sequences of the token sum divided by a
constant, so long and short responses are not re-weighted by their own lengths. verl computes Σ_i Σ_t ℓ / L per
micro-batch and then scales by its gradient-accumulation factor, which makes the result depend on the micro-batch
size; here the mean over sequences is explicit (the paper's formula) and does not.

DeepSpeed averages gradients over data-parallel ranks, so each rank divides by its share of T and S
(`Normalizer.per_rank`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


@dataclass(frozen=True)
class Normalizer:
    """The denominators of one optimizer step: loss tokens, sequences with a loss token, and L."""

    tokens: float
    sequences: float
    scale_factor: float = 1.0

    def per_rank(self, world_size: int) -> Normalizer:
        return Normalizer(self.tokens / world_size, self.sequences / world_size, self.scale_factor)


def token_weights(mode: str, seq: torch.Tensor, norm: Normalizer) -> torch.Tensor:
    """w_t for each selected loss token; `seq` maps each token to its sequence (0..S_local−1)."""
    if mode == "token-mean":
        return torch.full(seq.shape, 1.0 / max(norm.tokens, 1e-12), device=seq.device)
    sequences = max(norm.sequences, 1e-12)
    if mode == "seq-mean-token-mean":
        counts = torch.bincount(seq).to(torch.float32)
        return 1.0 / (counts[seq] * sequences)
    if mode == "seq-mean-token-sum":
        return torch.full(seq.shape, 1.0 / sequences, device=seq.device)
    if mode == "seq-mean-token-sum-norm":
        return torch.full(seq.shape, 1.0 / (sequences * norm.scale_factor), device=seq.device)
    raise ValueError(f"unknown loss aggregation {mode!r}; use one of {', '.join(AGG_MODES)}")


def aggregate(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (values * weights).sum()
