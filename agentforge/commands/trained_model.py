"""What `sft` and `rft` share once their data is made: log each SFT step, write the full model beside its held-out
record (so a later run that starts from it knows which tasks it trained on), and the summary the command returns."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from agentforge.tasks.held_out import earlier_training, run_record, write_record
from agentforge.tracking.progress import console
from agentforge.tracking.tracker import RunTracker
from agentforge.training.sft import save_full_model


def step_logger(tracker: RunTracker, command: str, steps: int) -> Callable[[int, dict[str, float]], None]:
    """`on_step` for the SFT epochs: metrics under `<command>/` and a line per step (a log file shows progress)."""

    def on_step(step: int, metrics: dict[str, float]) -> None:
        tracker.log(step, {f"{command}/{k}": v for k, v in metrics.items()})
        console.print(f"{command} step {step}/{steps} loss {metrics.get('loss', float('nan')):.4f}")

    return on_step


def save_trained_model(cfg: DictConfig, command: str, spec: Any, weights: dict[str, Any], run_dir: Path,
                       held_out: Any, streams: Any) -> Path:
    """The full HF folder at `<command>.output` (default `<run dir>/model`) with the held-out record of every task
    this model (and the model it started from) trained on."""
    section = cfg[command]
    out_dir = Path(section.output) if section.get("output") else run_dir / "model"
    save_full_model(spec, weights, out_dir)
    earlier = earlier_training(cfg.model.get("init_from"))
    write_record((run_dir, out_dir), run_record(held_out, streams, {}, earlier))
    return out_dir


def finish(run_dir: Path, command: str, summary: dict[str, Any]) -> dict[str, Any]:
    """`summary.json` and the line that says how to use the model."""
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(f"{command.upper()} model: {summary['model']}\n"
                  f"use it with: agentforge train recipe=... model.init_from={summary['model']}")
    return summary
