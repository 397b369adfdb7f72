"""What `agentforge export` / `serve` were pointed at: the checkpoint (newest of a run dir), its base model and the
run it came from (config.yaml, summary.json, metrics.jsonl), each refused by name with the fix when unusable."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentforge.errors import AgentforgeError, ConfigError
from agentforge.evaluation.checkpoint_source import CheckpointSource, resolve_checkpoint
from agentforge.reliability.checkpoint import CheckpointManager

EXPECTED = ("expected a train run dir (runs/train/<time>, with checkpoints/), a checkpoint dir "
            "(<run>/checkpoints/iter_000010) or an `agentforge sft`/`rft` run dir (with model/)")
EXPORT_META = "agentforge_export.json"  # written into every exported folder: what it came from


class ExportError(AgentforgeError):
    """A checkpoint that cannot be exported or served; the message names the fix."""


@dataclass
class RunInfo:
    """The checkpoint to export and the run around it (empty dicts when the run's files are not there)."""

    source: CheckpointSource
    base_model: str | None  # the folder LoRA adapters apply to (None for full weights)
    config: dict[str, Any] = field(default_factory=dict)  # the run's resolved config.yaml
    summary: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)

    @property
    def run_dir(self) -> Path | None:
        return self.source.run_dir

    @property
    def iteration(self) -> int | None:
        return self.source.iteration


def locate(path: str, base: str | None = None) -> RunInfo:
    """Resolve `path` to its checkpoint; `base` replaces a LoRA checkpoint's recorded base model."""
    folder = Path(path).expanduser()
    if not folder.exists():
        raise ExportError(f"{path}: no such directory; {EXPECTED}")
    if not folder.is_dir():
        raise ExportError(f"{path} is a file, not a directory; {EXPECTED}")
    if (folder / EXPORT_META).is_file():
        raise ExportError(f"{path} is already an exported model (it has {EXPORT_META}); load it with transformers or "
                          f"vLLM as it is, or `agentforge serve {path}`")
    if (folder / "checkpoints").is_dir() and CheckpointManager(folder / "checkpoints").latest() is None:
        raise ExportError(f"{path} is a run dir without a complete checkpoint under checkpoints/ (the run stopped "
                          "before its first trainer.checkpoint_every, or while saving); export an earlier run, or "
                          "train with trainer.checkpoint_every > 0")
    if not (folder / "checkpoints").is_dir() and (folder / "model" / "config.json").is_file():
        folder = folder / "model"  # an sft / rft run: its model/ folder is the result
        source = CheckpointSource(kind="model", path=folder, weights_dir=folder, run_dir=folder.parent,
                                  dtype=_config_dtype(folder))
    else:
        looks_like = ((folder / "checkpoints").is_dir() or folder.name.startswith("iter_")
                      or (folder / "trainer_state.json").exists() or (folder / "learner.json").exists())
        if not looks_like:
            raise ExportError(f"{path} is not a checkpoint: no checkpoints/, trainer_state.json or model/ in it; "
                              f"{EXPECTED}")
        try:
            source = resolve_checkpoint(folder)
        except ConfigError as error:
            raise ExportError(str(error).replace("checkpoint=", "")) from None
        assert source is not None
    base_model = None
    if source.lora:
        base_model = base or source.base_model
        if not base_model or not (Path(base_model) / "config.json").is_file():
            raise ExportError(
                f"{source.path} holds a LoRA adapter whose base model {base_model or '(not recorded)'} is missing "
                "(no config.json there: the model cache was moved or cleared). Rebuild it by running any command "
                "of the run's recipe once (e.g. `agentforge rollout recipe=<recipe> rollout.num_tasks=1`), or name "
                "the base folder: base=<HF folder of the model the run trained>")
    run_dir = source.run_dir
    return RunInfo(source, base_model, _yaml(run_dir / "config.yaml") if run_dir else {},
                   _json(run_dir / "summary.json") if run_dir else {},
                   _jsonl(run_dir / "metrics.jsonl") if run_dir else [])


def _config_dtype(model_dir: Path) -> str:
    config = _json(model_dir / "config.json")
    return str(config.get("dtype") or config.get("torch_dtype") or "float32")


def _yaml(path: Path) -> dict[str, Any]:
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line a killed run left half-written
    return rows
