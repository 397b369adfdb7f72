"""What `agentforge eval checkpoint=<path>` evaluates: find the weights a path names and load them without DeepSpeed.

A path may be a train run dir (its newest complete checkpoint), a checkpoint dir (`<run>/checkpoints/iter_000010`),
a learner dir inside one (`.../iter_000010/learner`), or an HF model dir (`agentforge sft`'s `model/`, any causal
LM folder). Checkpoints hold the learner's HF export in `learner/hf`: the full model, or a peft LoRA adapter whose
base is the learner's `model_path` (recorded in `learner/learner.json`).

Checkpoint weights reach the engine the way the trainer's do: the engine starts on the recipe's model and gets
`update_weights(...)` with every weight in HF names, LoRA deltas merged by the learner's own merge code; so an
evaluation with the trainer's eval settings samples exactly what the trainer's eval sampled. An HF model dir needs
no push: the engine is built on it directly (like `model.init_from`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentforge.errors import ConfigError
from agentforge.reliability.checkpoint import MARKER, CheckpointManager

EXPECTED = (
    "expected a train run dir (with checkpoints/), a checkpoint dir (<run>/checkpoints/iter_000010) or an HF model "
    "dir (with config.json, e.g. an `agentforge sft` run's model/)"
)
# Config fields that must agree between the checkpoint's model and the recipe's, or the weights cannot fit.
ARCHITECTURE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                     "intermediate_size", "vocab_size")


@dataclass(frozen=True)
class CheckpointSource:
    """Resolved `checkpoint=`: `kind` is `checkpoint` (weights pushed into the engine) or `model` (engine built on
    `weights_dir`). `base_model` is the model the learner trained (LoRA adapters apply to it)."""

    kind: str
    path: Path
    weights_dir: Path
    iteration: int | None = None
    run_dir: Path | None = None
    base_model: str | None = None
    lora: bool = False
    dtype: str = "float32"

    def describe(self) -> str:
        if self.kind == "model":
            return f"HF model {self.weights_dir}"
        what = "LoRA adapter" if self.lora else "full weights"
        return f"checkpoint {self.path} (iteration {self.iteration}, {what})"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "weights_dir": str(self.weights_dir),
                "iteration": self.iteration, "run_dir": str(self.run_dir) if self.run_dir else None,
                "base_model": self.base_model, "lora": self.lora, "dtype": self.dtype}


def resolve_checkpoint(value: Any) -> CheckpointSource | None:
    """`checkpoint=` → where its weights are; None/null → None (the recipe's model as shipped)."""
    if value is None or str(value).lower() in ("", "null", "none"):
        return None
    path = Path(str(value)).expanduser()
    if not path.exists():
        raise ConfigError(f"checkpoint={value}: no such file or directory; {EXPECTED}")
    if not path.is_dir():
        raise ConfigError(f"checkpoint={value} is a file, not a directory; {EXPECTED}")
    if (path / "checkpoints").is_dir():
        latest = CheckpointManager(path / "checkpoints").latest()
        if latest is None:
            raise ConfigError(f"checkpoint={value} is a run dir without a complete checkpoint under checkpoints/ "
                              "(the run ended before its first checkpoint_every, or it was interrupted while saving); "
                              "point checkpoint= at an earlier run or a checkpoint dir")
        return _from_checkpoint_dir(latest.path, run_dir=path)
    if path.name.startswith("iter_") or (path / "trainer_state.json").exists():
        return _from_checkpoint_dir(path, run_dir=path.parent.parent if path.parent.name == "checkpoints" else None)
    if (path / "learner.json").exists() and (path / "hf").is_dir():
        return _from_learner_dir(path, checkpoint_dir=path.parent, run_dir=None)
    if (path / "adapter_config.json").exists():
        raise ConfigError(f"checkpoint={value} is a bare LoRA adapter; give the checkpoint dir that holds it "
                          "(<run>/checkpoints/iter_N), which records the base model the adapter was trained on")
    if (path / "config.json").exists():
        return CheckpointSource(kind="model", path=path, weights_dir=path)
    raise ConfigError(f"checkpoint={value} is a directory, but not a run, checkpoint or model dir; {EXPECTED}")


def _from_checkpoint_dir(path: Path, run_dir: Path | None) -> CheckpointSource:
    if not (path / MARKER).exists():
        raise ConfigError(f"checkpoint {path} is incomplete (no {MARKER} marker: saving was interrupted); use an "
                          "earlier checkpoint, or the run dir to pick its newest complete one")
    return _from_learner_dir(path / "learner", checkpoint_dir=path, run_dir=run_dir)


def _from_learner_dir(learner_dir: Path, checkpoint_dir: Path, run_dir: Path | None) -> CheckpointSource:
    meta_path, hf_dir = learner_dir / "learner.json", learner_dir / "hf"
    if not meta_path.exists() or not hf_dir.is_dir():
        raise ConfigError(f"checkpoint {checkpoint_dir} has no learner export ({meta_path} and {hf_dir}/ expected); "
                          f"it was not written by `agentforge train`. {EXPECTED}")
    meta = json.loads(meta_path.read_text())
    lora = (hf_dir / "adapter_config.json").exists()
    if not lora and not (hf_dir / "config.json").exists():
        raise ConfigError(f"{hf_dir} holds neither a model (config.json) nor a LoRA adapter (adapter_config.json); "
                          "the checkpoint is damaged: use an earlier one")
    iteration = None
    state = checkpoint_dir / "trainer_state.json"
    if state.exists():
        iteration = int(json.loads(state.read_text()).get("iteration", 0))
    return CheckpointSource(
        kind="checkpoint", path=checkpoint_dir, weights_dir=hf_dir, iteration=iteration, run_dir=run_dir,
        base_model=meta.get("model_path"), lora=lora, dtype=str(meta.get("config", {}).get("dtype", "float32")),
    )


def _architecture(model_dir: str | Path) -> dict[str, Any]:
    config_path = Path(model_dir) / "config.json"
    if not config_path.exists():
        return {}
    config = json.loads(config_path.read_text())
    return {k: config.get(k) for k in ARCHITECTURE_KEYS if k in config}


def check_compatible(source: CheckpointSource, engine_model: str) -> None:
    """The checkpoint's weights must fit the engine's model; say which recipe/model to use when they do not."""
    trained_on = source.weights_dir if not source.lora else source.base_model
    if trained_on is None:
        return
    want, have = _architecture(trained_on), _architecture(engine_model)
    differ = {k: (want[k], have[k]) for k in want.keys() & have.keys() if want[k] != have[k]}
    if differ:
        details = ", ".join(f"{k}: checkpoint {a} vs engine {b}" for k, (a, b) in sorted(differ.items()))
        raise ConfigError(f"{source.describe()} does not fit the recipe's model {engine_model} ({details}); evaluate "
                          "with the recipe and model overrides the run was trained with (see its config.yaml)")


def policy_weights(source: CheckpointSource | None, base_model: str) -> list[tuple[str, torch.Tensor]]:
    """Every weight of a policy to push into a running engine: a checkpoint's (LoRA merged), an HF model dir's, or
    (None) the base model's as shipped. What `agentforge eval compare=` swaps in to play the same tasks."""
    if source is not None and source.kind == "checkpoint":
        return load_checkpoint_weights(source, base_model)
    from transformers import AutoModelForCausalLM

    from agentforge.learner.lora import hf_name

    path = source.weights_dir if source is not None else base_model
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return [(hf_name(n), p.detach().clone()) for n, p in model.named_parameters()]


def resolve_compare(value: Any) -> tuple[bool, CheckpointSource | None]:
    """`compare=`: (False, None) when absent; (True, None) for `base` (the recipe's model as shipped); else the
    resolved checkpoint."""
    if value is None or str(value).lower() in ("", "null", "none"):
        return False, None
    if str(value).lower() in ("base", "shipped"):
        return True, None
    return True, resolve_checkpoint(value)


def load_checkpoint_weights(source: CheckpointSource, fallback_base: str) -> list[tuple[str, torch.Tensor]]:
    """Every weight of the checkpoint's policy in HF names, as the learner's `export_weights()` gives them.

    LoRA: the adapter is applied to its base (`learner.json`'s model_path, else `fallback_base`) and merged with the
    learner's merge code into new tensors; tied weights appear once, as in the learner's export.
    """
    from transformers import AutoModelForCausalLM

    from agentforge.learner.lora import adapted_weight_names, hf_name, is_lora_parameter, merged_lora_weights
    from agentforge.models.loading import torch_dtype

    dtype = torch_dtype(source.dtype)
    if not source.lora:
        model = AutoModelForCausalLM.from_pretrained(source.weights_dir, dtype=dtype)
        return [(hf_name(n), p.detach().clone()) for n, p in model.named_parameters()]
    from peft import PeftModel

    base_path = source.base_model if source.base_model and Path(source.base_model).exists() else fallback_base
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=dtype)
    model = PeftModel.from_pretrained(base, str(source.weights_dir))
    out = list(merged_lora_weights(model))
    skip = adapted_weight_names(model)
    out.extend((hf_name(n), p.detach().clone()) for n, p in model.named_parameters()
               if n not in skip and not is_lora_parameter(n))
    return out
