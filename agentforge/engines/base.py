"""The RolloutEngine protocol: token ids in, sampled token ids + log-probs out."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import torch

from agentforge.engines.interventions import InterventionSpec
from agentforge.types import Completion, SamplingConfig


@runtime_checkable
class RolloutEngine(Protocol):
    """Batch generation from token-id prompts, plus in-place weight updates.

    `interventions[i]` (or None) applies to prompt i only; forced tokens come back marked in
    `Completion.forced_mask`. With `sampling.uncertainty`, every completion carries per-token `entropy` and
    `top_prob` from the raw logits (`interventions.next_token_uncertainty`); both are None otherwise.
    """

    tokenizer: Any
    vocab_size: int  # the width of a logits row (|V| of the model's output layer; may exceed len(tokenizer))

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig,
        interventions: list[InterventionSpec | None] | None = None,
    ) -> list[Completion]: ...

    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        """The log-prob of each response token given its prompt and the tokens before it, from the raw logits
        (the same convention as `Completion.logprobs`): old log-probs for a response the engine did not sample
        under this prompt (TrajEvolve's evolved turns)."""
        ...

    def reseed(self, seed: int) -> None: ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None: ...

    def sleep(self) -> None: ...

    def wake(self) -> None: ...

    def close(self) -> None: ...
