"""Fail before training when the model cannot fit: a per-rank estimate of the learner's model-state memory.

Model states per parameter (mixed or full precision alike, as DeepSpeed keeps fp32 master weights and Adam moments):
weights (2 or 4 bytes), gradients (same), fp32 master copy (4, bf16 only) and Adam's two moments (8). ZeRO splits
them across ranks: stage 1 the optimizer states, stage 2 also the gradients, stage 3 also the weights. With LoRA
only adapter parameters carry gradients and optimizer states. Activations come on top, so the check keeps a margin.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil
import torch

from agentforge.errors import ConfigError
from agentforge.learner.config import LearnerConfig


@dataclass(frozen=True)
class MemoryEstimate:
    parameters: int
    trainable: int
    bytes_per_rank: int


def count_parameters(model_path: str) -> int:
    """Parameter count from the model's config alone (meta device: no weights are loaded)."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
    return sum(p.numel() for p in model.parameters())


def estimate(parameters: int, config: LearnerConfig) -> MemoryEstimate:
    weight_bytes = 2 if config.dtype == "bfloat16" else 4
    trainable = int(parameters * 0.01) if config.lora.enabled else parameters  # LoRA adapters: ~1% (r=16)
    master = 4 if config.dtype == "bfloat16" else 0
    ranks, stage = max(1, config.num_ranks), config.zero_stage
    weights = parameters * weight_bytes / (ranks if stage >= 3 else 1)
    grads = trainable * weight_bytes / (ranks if stage >= 2 else 1)
    optimizer = trainable * (8 + master) / (ranks if stage >= 1 else 1)
    return MemoryEstimate(parameters, trainable, int(weights + grads + optimizer))


def available_bytes_per_rank(config: LearnerConfig) -> int:
    if torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(0).total_memory)
    return int(psutil.virtual_memory().available / max(1, config.num_ranks))


def check_memory_fit(model_path: str, config: LearnerConfig, margin: float = 0.8) -> MemoryEstimate:
    """Raise ConfigError when model states alone exceed `margin` of a rank's memory, naming the ways out."""
    found = estimate(count_parameters(model_path), config)
    available = available_bytes_per_rank(config)
    if found.bytes_per_rank > margin * available:
        gib = 2**30
        raise ConfigError(
            f"the learner needs ~{found.bytes_per_rank / gib:.1f} GiB per rank for model states alone "
            f"({found.parameters / 1e9:.2f}B parameters, {config.dtype}, ZeRO stage {config.zero_stage}, "
            f"{config.num_ranks} rank(s), LoRA {'on' if config.lora.enabled else 'off'}) but a rank has "
            f"~{available / gib:.1f} GiB; enable learner.lora.enabled, use learner.dtype=bfloat16, a higher "
            "learner.zero_stage or more learner.num_ranks"
        )
    return found
