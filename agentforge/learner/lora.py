"""peft LoRA helpers: wrapping a model, naming weights the HF way, and computing merged weights for export.

The rollout engine loads plain HF checkpoints, so exported names carry no peft prefixes and LoRA deltas are
merged into *new* tensors (W + scale·B·A): the trained adapters are never touched, training continues unmerged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from agentforge.learner.config import LoraSettings

PEFT_PREFIX = "base_model.model."


def wrap_with_lora(model: torch.nn.Module, settings: LoraSettings) -> torch.nn.Module:
    """The model with trainable LoRA adapters on `settings.target_modules` and everything else frozen."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def hf_name(peft_name: str) -> str:
    """peft name -> HF name: `base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight` becomes
    `model.layers.0.self_attn.q_proj.weight`."""
    name = peft_name[len(PEFT_PREFIX):] if peft_name.startswith(PEFT_PREFIX) else peft_name
    return name.replace(".base_layer.", ".")


def lora_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """(module name, peft LoRA layer) for every adapted module."""
    from peft.tuners.lora import LoraLayer

    return [(name, m) for name, m in model.named_modules() if isinstance(m, LoraLayer)]


def merged_lora_weights(
    model: torch.nn.Module,
    gather: Callable[[list[torch.nn.Parameter]], contextlib.AbstractContextManager] | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, W + scale·B·A) for each adapted module's weight, as new CPU tensors in W's dtype.

    `gather(params)` makes partitioned parameters whole for the duration of the block (ZeRO-3); default: none.
    Only the active adapter is merged; adapters with DoRA or several active adapters are not supported.
    """
    gather = gather or (lambda params: contextlib.nullcontext())
    for name, layer in lora_layers(model):
        adapters = [a for a in layer.active_adapters if a in layer.lora_A]
        if len(adapters) != 1:
            raise NotImplementedError(f"{name}: merged export needs exactly one active LoRA adapter, got {adapters}")
        adapter = adapters[0]
        if getattr(layer, "use_dora", {}).get(adapter, False):
            raise NotImplementedError(f"{name}: merged export of DoRA adapters is not supported")
        base = layer.get_base_layer()
        params = [base.weight, layer.lora_A[adapter].weight, layer.lora_B[adapter].weight]
        with gather(params), torch.no_grad():
            weight = base.weight
            a = layer.lora_A[adapter].weight.float()
            b = layer.lora_B[adapter].weight.float()
            delta = (b @ a) * layer.scaling[adapter]
            if getattr(layer, "fan_in_fan_out", False):
                delta = delta.T
            merged = (weight.float() + delta).to(weight.dtype).detach().cpu().clone()
        yield hf_name(f"{name}.weight"), merged


# Projections vLLM loads into one fused weight (its Llama-family models' `packed_modules_mapping`: qkv_proj,
# gate_up_proj). A weight push that carries some members of a group and not the others leaves the others'
# rows of the fused weight uninitialised: vLLM's layerwise reload rebuilds a layer from fresh memory, loads what it
# was given and copies the whole layer back, so LoRA on q_proj and v_proj alone pushed garbage (at times NaN) into
# k_proj's rows. A partial push therefore carries the whole group.
PACKED_GROUPS: tuple[tuple[str, ...], ...] = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def packed_siblings(names: set[str]) -> set[str]:
    """HF weight names of the fused-group members that `names` lacks (`...self_attn.q_proj.weight` given alone
    names `...k_proj.weight` and `...v_proj.weight`)."""
    missing: set[str] = set()
    for name in names:
        parent, _, leaf = name.rpartition(".")  # leaf: "weight" or "bias"
        module_path, _, module = parent.rpartition(".")
        for group in PACKED_GROUPS:
            if module in group:
                missing |= {f"{module_path}.{member}.{leaf}" for member in group} - names
    return missing


def adapted_weight_names(model: torch.nn.Module) -> set[str]:
    """peft parameter names of the base weights that LoRA adapts (replaced by merged ones on export)."""
    return {f"{name}.base_layer.weight" for name, _ in lora_layers(model)}


def is_lora_parameter(peft_name: str) -> bool:
    return ".lora_" in peft_name
