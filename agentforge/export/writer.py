"""Write a checkpoint as a self-contained Hugging Face folder: weights (LoRA merged as the learner merged it, or the
adapter with its base named), tokenizer with its chat template, generation_config.json with the run's sampling, a
model card and `agentforge_export.json` (what it came from).

Merging: as the learner merged for the trainer's engine (`merged_as_trained`): the base in the learner's dtype,
W + scale·B·A in fp32, rounded once to that dtype, then cast to the dtype asked (by default the checkpoint's
own). The export therefore holds, tensor for tensor, the weights `eval checkpoint=` and the trainer's engine
ran, also when a bf16 run trained on a base stored in fp32, and generates the same tokens (tested, both
engines, fp32 and bf16).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentforge import __version__
from agentforge.export.card import model_card
from agentforge.export.source import EXPORT_META, ExportError, RunInfo
from agentforge.models.loading import torch_dtype

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


@dataclass
class ExportResult:
    out: Path
    what: str  # one line: which checkpoint, how (merged / adapter / full), dtype
    meta: dict[str, Any]


def default_out(info: RunInfo) -> Path:
    """`<run dir>/export/iter_<N>` (or `<checkpoint dir>-export` outside a run)."""
    source = info.source
    if info.run_dir is not None:
        name = f"iter_{source.iteration:06d}" if source.iteration is not None else "model"
        return info.run_dir / "export" / name
    return source.path.with_name(f"{source.path.name}-export")


def check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "a file" if not out.is_dir() else "not empty"
        raise ExportError(f"out={out} exists and is {what}: nothing was written. Choose another out=, or remove it "
                          f"first (rm -r {out})")


def export_model(info: RunInfo, out: Path, dtype: str | None = None, adapter_only: bool = False) -> ExportResult:
    """Write the export into `out` (refused when it exists and is not empty); a failure leaves no half folder."""
    check_out(out)
    source = info.source
    if adapter_only and not source.lora:
        raise ExportError(f"adapter_only=true: {source.path} holds full weights, not a LoRA adapter (the run trained "
                          "without learner.lora.enabled); export it without adapter_only")
    dtype = dtype or source.dtype
    out.parent.mkdir(parents=True, exist_ok=True)
    # a fresh folder of our own beside `out` (same filesystem: the rename below is atomic); nothing that exists is
    # ever removed, only what this export created
    partial = Path(tempfile.mkdtemp(prefix=f".partial-{out.name}-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    partial.chmod(0o777 & ~umask)  # mkdtemp's 0700 would follow the folder: a model folder as mkdir makes it
    try:
        how = _write_adapter(info, partial, dtype) if adapter_only else _write_model(info, partial, dtype)
        tokenizer = _write_tokenizer(info, partial)
        sampling = run_sampling(info.config)
        _write_generation_config(partial, tokenizer, sampling)
        meta = export_meta(info, how, dtype, adapter_only, sampling, out)
        (partial / EXPORT_META).write_text(json.dumps(meta, indent=2, default=str))
        (partial / "README.md").write_text(model_card(info, meta))
        if out.exists():
            out.rmdir()  # empty, checked above
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    what = (f"{source.describe()} → {out} ({how}, {dtype.replace('bfloat', 'bf').replace('float', 'fp')})")
    return ExportResult(out, what, meta)


def _write_model(info: RunInfo, out: Path, dtype: str) -> str:
    from transformers import AutoModelForCausalLM

    source = info.source
    if source.lora:
        model = merged_as_trained(info)
        how = f"LoRA merged into {Path(str(info.base_model)).name}"
    else:
        model = AutoModelForCausalLM.from_pretrained(source.weights_dir, dtype=torch.float32)
        how = "full weights"
    model = model.to(torch_dtype(dtype))
    model.config.dtype = torch_dtype(dtype)
    model.save_pretrained(out)
    return how


def merged_as_trained(info: RunInfo) -> Any:
    """The base with the adapter merged as the learner merged it for the trainer's engine: the base in the learner's
    dtype (a base stored in fp32 is rounded to bf16 first, as the learner loaded it), W + scale·B·A in fp32, rounded
    once (`load_checkpoint_weights`, the code `eval checkpoint=` uses). Merging onto the fp32 base instead gives
    other numbers in every adapted projection when the run trained in bf16."""
    from dataclasses import replace

    from transformers import AutoModelForCausalLM

    from agentforge.evaluation.checkpoint_source import load_checkpoint_weights

    source = replace(info.source, base_model=str(info.base_model))
    weights = dict(load_checkpoint_weights(source, fallback_base=str(info.base_model)))
    model = AutoModelForCausalLM.from_pretrained(info.base_model, dtype=torch_dtype(source.dtype))
    result = model.load_state_dict(weights, strict=False)
    tied = {name for name in result.missing_keys if name.endswith("lm_head.weight")}
    if result.unexpected_keys or set(result.missing_keys) - tied:
        raise ExportError(f"{source.weights_dir}: the merged weights do not fit {info.base_model} (missing "
                          f"{sorted(set(result.missing_keys) - tied)[:3]}, unexpected {result.unexpected_keys[:3]}); "
                          "is base= the model the run trained?")
    return model


def _write_adapter(info: RunInfo, out: Path, dtype: str) -> str:
    """The peft adapter as trained, its tensors cast to `dtype`, with `base_model_name_or_path` naming the base."""
    from safetensors.torch import load_file, save_file

    hf = info.source.weights_dir
    config = json.loads((hf / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(info.base_model)
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))
    weights = hf / "adapter_model.safetensors"
    if not weights.is_file():
        raise ExportError(f"{hf} has no adapter_model.safetensors: the checkpoint is damaged; export an earlier one")
    tensors = {name: t.to(torch_dtype(dtype)).contiguous() for name, t in load_file(str(weights)).items()}
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    return f"LoRA adapter on {Path(str(info.base_model)).name}"


def _write_tokenizer(info: RunInfo, out: Path) -> Any:
    """The tokenizer the run used (the checkpoint's copy, else the base model's), chat template included."""
    from transformers import AutoTokenizer

    source = info.source
    folder = source.weights_dir if (source.weights_dir / "tokenizer_config.json").is_file() else info.base_model
    if folder is None or not (Path(folder) / "tokenizer_config.json").is_file():
        raise ExportError(f"no tokenizer for {source.path}: neither {source.weights_dir} nor the base model has "
                          "tokenizer_config.json; name the base folder with base=<HF folder>")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.save_pretrained(out)
    if not getattr(tokenizer, "chat_template", None):
        raise ExportError(f"the tokenizer in {folder} has no chat template: the exported model could not be "
                          "prompted the way it was trained")
    return tokenizer


def run_sampling(config: dict[str, Any]) -> dict[str, Any]:
    """The run's sampling (`agent.sampling`), and the eval temperature it measured with."""
    sampling = dict((config.get("agent") or {}).get("sampling") or {})
    out = {k: sampling[k] for k in ("temperature", "top_p", "top_k", "max_new_tokens", "stop", "presence_penalty",
                                    "repetition_penalty") if k in sampling}
    eval_temperature = (config.get("trainer") or {}).get("eval_temperature")
    if eval_temperature is not None:
        out["eval_temperature"] = eval_temperature
    return out


def _write_generation_config(out: Path, tokenizer: Any, sampling: dict[str, Any]) -> None:
    from transformers import GenerationConfig

    existing = out / "generation_config.json"
    config = GenerationConfig.from_pretrained(out) if existing.is_file() else GenerationConfig()
    eos = {config.eos_token_id} if isinstance(config.eos_token_id, int) else set(config.eos_token_id or [])
    eos |= {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
    eos |= {im_end} if im_end is not None else set()
    config.eos_token_id = sorted(eos)[0] if len(eos) == 1 else sorted(eos)
    config.pad_token_id = tokenizer.pad_token_id
    config.bos_token_id = tokenizer.bos_token_id
    temperature = float(sampling.get("temperature", 1.0))
    config.do_sample = temperature > 0
    if temperature > 0:
        config.temperature = temperature
        config.top_p = float(sampling.get("top_p", 1.0))
        config.top_k = int(sampling.get("top_k", 0)) or None
    if sampling.get("max_new_tokens"):
        config.max_new_tokens = int(sampling["max_new_tokens"])
    if sampling.get("repetition_penalty", 1.0) != 1.0:
        config.repetition_penalty = float(sampling["repetition_penalty"])
    if sampling.get("stop"):
        config.stop_strings = list(sampling["stop"])
    config.save_pretrained(out)


def shareable(path: Any, out: Path) -> Any:
    """A local path as the export may show it: relative to the export folder, or `~/...` for one under the home
    folder elsewhere (a model folder is shared; the user's name and layout stay home). Not a path: unchanged."""
    if not isinstance(path, (str, Path)) or not str(path).startswith("/"):
        return path
    home = Path.home()
    target = Path(path)
    if target.is_relative_to(home) and not out.resolve().parent.is_relative_to(target.parent):
        return f"~/{target.relative_to(home)}"
    return os.path.relpath(target, out)


def export_meta(info: RunInfo, how: str, dtype: str, adapter_only: bool, sampling: dict[str, Any],
                out: Path | None = None) -> dict[str, Any]:
    source, cfg = info.source, info.config
    here = out or Path.cwd()
    return {
        "agentforge_version": __version__, "source": {k: shareable(v, here) for k, v in source.to_json().items()},
        "how": how, "dtype": dtype, "adapter_only": adapter_only, "base_model": shareable(info.base_model, here),
        "sampling": sampling,
        "recipe": _recipe(cfg), "algorithm": (cfg.get("algorithm") or {}).get("name"),
        "env": (cfg.get("env") or {}).get("name"), "model_name": (cfg.get("model") or {}).get("name"),
        "max_model_len": (cfg.get("engine") or {}).get("max_model_len"),
    }


def _recipe(cfg: dict[str, Any]) -> str | None:
    recipe = cfg.get("recipe")
    if isinstance(recipe, dict):
        return recipe.get("name")
    return recipe if isinstance(recipe, str) else None
