"""A learner rank's reference policy (KL in the loss or in the reward): a frozen copy of the full model, or with
LoRA a copy of the adapter tensors swapped in for the reference forward (no second model); with ZeRO-3 and LoRA
the base model (adapters off). `reset_reference()` after a warm start makes it the policy RL starts from."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from agentforge.errors import AgentforgeError
from agentforge.learner.lora import is_lora_parameter
from agentforge.learner.packing import PackedBatch, packed_logits, token_logprobs


class RankReference:
    """Mixed into `DeepSpeedLearnerRank` (which provides `engine`, `config`, `reference`, `reference_adapter`,
    `reference_moved` and `_gather_context`)."""

    engine: Any
    config: Any
    reference: torch.nn.Module | None
    reference_adapter: dict[str, torch.Tensor] | None
    reference_moved: bool

    def _reference_copy(self, model: torch.nn.Module) -> torch.nn.Module | None:
        if not self.config.needs_reference() or self.config.lora.enabled:
            return None
        import copy

        reference = copy.deepcopy(model).eval()
        reference.requires_grad_(False)
        return reference

    def _adapter_parameters(self) -> dict[str, torch.nn.Parameter]:
        return {n: p for n, p in self.engine.module.named_parameters() if is_lora_parameter(n)}

    def _adapter_snapshot(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self._adapter_parameters().items()}

    def reset_reference(self) -> None:
        """Make the reference policy the current one (after a warm start: KL then pulls toward the policy RL starts
        from, not the model as loaded). A no-op without a KL term."""
        if not self.config.needs_reference():
            return
        if self.config.lora.enabled:
            if self.reference_adapter is None:
                raise AgentforgeError("with LoRA under ZeRO-3 the KL reference is the base model (adapters off) and "
                                      "cannot follow a warm start; use learner.zero_stage <= 2, or warm-start into "
                                      "a model folder first (agentforge sft) and train from it with model.init_from")
            self.reference_adapter = self._adapter_snapshot()
        else:
            gather = self._gather_context()
            with torch.no_grad():
                for (_, ref), param in zip(self.reference.named_parameters(), self.engine.module.parameters(),
                                           strict=True):
                    with gather([param]):
                        ref.copy_(param.detach().to(ref.device, ref.dtype))
        self.reference_moved = True

    def reference_state(self) -> dict[str, torch.Tensor]:
        """The reference's own tensors (full model: its weights; LoRA: the adapter), for checkpoints."""
        if self.reference is not None:
            # cloned: tied weights (SmolLM2's lm_head = embed_tokens) share storage, which safetensors refuses
            return {n: t.detach().cpu().clone() for n, t in self.reference.state_dict().items()}
        return {n: t.detach().cpu().clone() for n, t in (self.reference_adapter or {}).items()}

    def load_reference_state(self, state: dict[str, torch.Tensor]) -> None:
        if self.reference is not None:
            self.reference.load_state_dict(state)
        elif self.reference_adapter is not None:
            missing = sorted(set(self.reference_adapter) - set(state))
            if missing:
                raise AgentforgeError(f"the checkpoint's reference adapter lacks {missing[:3]}...; it was written with "
                                      "another LoRA configuration")
            self.reference_adapter = {n: state[n].to(self.device) for n in self.reference_adapter}
        self.reference_moved = True

    @contextlib.contextmanager
    def _reference_weights(self):
        """The engine's module computing as the reference policy (LoRA: the reference adapter swapped in)."""
        if self.reference_adapter is None:
            with self.engine.module.disable_adapter():
                yield self.engine.module
            return
        params = self._adapter_parameters()
        saved = {n: p.data for n, p in params.items()}
        try:
            for n, p in params.items():
                p.data = self.reference_adapter[n]
            yield self.engine.module
        finally:
            for n, p in params.items():
                p.data = saved[n]

    def _reference_logprobs(self, batch: PackedBatch) -> torch.Tensor:
        with torch.no_grad():
            if self.reference is not None:
                logits = packed_logits(self.reference, batch)
            else:  # LoRA: the reference adapter (or none) in the same model
                with self._reference_weights() as module:
                    logits = packed_logits(module, batch)
            return token_logprobs(logits, batch.target, temperature=self.config.sampling_temperature)[0]
