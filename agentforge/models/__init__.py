"""Model resolution and loading: the default GGUF model, tiny test models, any HF folder."""

from __future__ import annotations

from agentforge.models.loading import (
    MODEL_NAMES,
    ModelSpec,
    cache_root,
    load_hf_model,
    load_tokenizer,
    resolve_model,
    torch_dtype,
)

__all__ = ["MODEL_NAMES", "ModelSpec", "cache_root", "load_hf_model", "load_tokenizer", "resolve_model", "torch_dtype"]
