"""Shared fixtures. Models are built once into the agentforge cache ($AGENTFORGE_CACHE or ~/.cache/agentforge)
and reused across runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentforge.models import ModelSpec, load_tokenizer, resolve_model


@pytest.fixture(scope="session")
def tiny_spec() -> ModelSpec:
    """The tiny 2-layer Llama with the SmolLM2 tokenizer, fp32 (built on first use, under a second after that)."""
    return resolve_model({"name": "tiny", "dtype": "float32"})


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_spec: ModelSpec) -> Path:
    """The tiny model's HF folder (config, safetensors, tokenizer): what vLLM and transformers load."""
    return Path(tiny_spec.path)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_spec: ModelSpec) -> Any:
    """The SmolLM2 tokenizer (ChatML template, `<|im_end|>` as EOS and pad)."""
    return load_tokenizer(tiny_spec)
