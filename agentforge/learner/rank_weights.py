"""A learner rank's weights going out: the policy in HF names (LoRA merged) for the rollout engine, and rank 0 as
the sender of the engine replicas' weight group (pushed weights go from this process to every replica over
gloo/NCCL, never through Ray's object store and the driver)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from agentforge.errors import AgentforgeError
from agentforge.learner.lora import (
    adapted_weight_names,
    hf_name,
    is_lora_parameter,
    merged_lora_weights,
    packed_siblings,
)


class RankWeights:
    """Mixed into `DeepSpeedLearnerRank` (which provides `engine`, `config`, `rank` and `_deepspeed`)."""

    engine: Any
    config: Any
    rank: int
    _deepspeed: Any

    def export_weights(self, only_changed: bool = False, copy: bool = True) -> list[tuple[str, torch.Tensor]]:
        """The policy's weights in HF checkpoint names (`model.layers.0...`), as CPU tensors on rank 0 (other ranks
        return []). With `copy=False` unchanged parameters come as views (no second copy of the weights; for a
        consumer that copies them at once, like a weight push). With LoRA the adapted modules' weights are merged
        (W + scale·B·A);
        `only_changed=True` returns just those (without LoRA every weight changes, so all are returned), plus the
        unchanged members of any fused projection group they belong to (`lora.PACKED_GROUPS`: a vLLM engine must get
        a fused weight whole). Tied weights appear once (`lm_head.weight` tied to `model.embed_tokens.weight` is left
        out)."""
        module = self.engine.module
        gather = self._gather_context()
        keep = self.rank == 0
        out: list[tuple[str, torch.Tensor]] = []
        if self.config.lora.enabled:
            merged = list(merged_lora_weights(module, gather))
            out.extend(merged if keep else [])
            skip = adapted_weight_names(module)
            named = [(n, p) for n, p in module.named_parameters() if n not in skip and not is_lora_parameter(n)]
            if only_changed:
                siblings = packed_siblings({name for name, _ in merged})
                named = [(n, p) for n, p in named if hf_name(n) in siblings]
        else:
            named = list(module.named_parameters())
        for name, param in named:
            with gather([param]):
                if keep:
                    # ZeRO-3 frees a gathered parameter on leaving the block, so it is always copied
                    tensor = param.detach().cpu()
                    out.append((hf_name(name), tensor.clone() if copy or self.config.zero_stage == 3 else tensor))
        return out

    # ------------------------------------------------------------------ weights straight to engine replicas
    # Rank 0 is the sender of the replicas' weight group (agentforge/engines/replicas/weight_group.py), so pushed
    # weights go from this process to every replica over gloo/NCCL, never through Ray's object store and the driver.

    def node_address(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def join_weight_group(self, host: str, port: int, world_size: int, backend: str, timeout_s: float) -> None:
        """Rank 0 only: become rank 0 (the sender) of the replicas' weight group."""
        from agentforge.engines.replicas.weight_group import WeightGroupMember

        self.leave_weight_group()
        self._weight_group = WeightGroupMember(host, port, 0, world_size, backend, timeout_s)

    def leave_weight_group(self) -> None:
        group = getattr(self, "_weight_group", None)
        self._weight_group = None
        if group is not None:
            group.close()

    def prepare_push(self, version: int, bucket_bytes: int) -> Any:
        """Collective: export the changed weights (every rank takes part: ZeRO-3 gathers); rank 0 keeps them for
        `send_push` and returns the push's manifest (other ranks None)."""
        from agentforge.engines.replicas.weight_group import plan_buckets

        named = self.export_weights(only_changed=True, copy=False)
        if self.rank != 0:
            return None
        self._pending_push = named
        return plan_buckets(named, bucket_bytes, version)

    def send_push(self, manifest: Any) -> None:
        """Rank 0: broadcast the prepared push, bucket by bucket."""
        named, self._pending_push = getattr(self, "_pending_push", None), None
        if named is None or getattr(self, "_weight_group", None) is None:
            raise AgentforgeError("send_push without prepare_push and join_weight_group on learner rank 0")
        self._weight_group.send(manifest, named)

    def _gather_context(self) -> Callable[[list[torch.nn.Parameter]], contextlib.AbstractContextManager]:
        if self.config.zero_stage != 3:
            return lambda params: contextlib.nullcontext()
        return lambda params: self._deepspeed.zero.GatheredParameters(params, modifier_rank=None)
