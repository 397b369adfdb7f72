"""`agentforge sft recipe=...`: expert play (`training.sft`) on the training stream, SFT epochs, a full model."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from omegaconf import DictConfig

from agentforge.commands.builders import (
    build_expert_play,
    build_held_out,
    build_model_spec,
    build_training_streams,
    plain,
    prepare_run_dir,
)
from agentforge.commands.trained_model import finish, save_trained_model, step_logger
from agentforge.learner import Learner, LearnerConfig
from agentforge.models.loading import load_tokenizer
from agentforge.reliability.closing import close_all
from agentforge.tracking.plotting import SFT_PANELS, plot_training_curves
from agentforge.tracking.progress import console
from agentforge.tracking.tracker import RunTracker
from agentforge.training.sft import epoch_steps, expert_dataset, run_sft_epochs


def run_sft(cfg: DictConfig) -> dict[str, Any]:
    """`agentforge sft recipe=...`: expert data → SFT epochs → `<run dir>/model` (a full HF folder)."""
    run_dir = prepare_run_dir(cfg)
    spec = build_model_spec(cfg)
    held_out, keyer = build_held_out(cfg, {})
    streams = build_training_streams(cfg, held_out, keyer)
    try:
        data = expert_dataset(replace(build_expert_play(cfg), streams=streams), cfg.sft, load_tokenizer(spec))
    finally:
        keyer.close()
    steps = epoch_steps(cfg.sft, len(data))
    console.print(f"[bold]sft[/] {len(data)} expert trajectories ({sum(t.length for t in data)} turns) · "
                  f"{steps} steps · model {spec.name}")
    learner = Learner(spec.path, LearnerConfig.from_mapping({**plain(cfg.learner), "total_steps": steps}))
    tracker = RunTracker(run_dir, {**plain(cfg.logger), "wandb": False}, plain(cfg), resume=False)

    try:
        done = run_sft_epochs(cfg.sft, int(cfg.seed), learner, data, step_logger(tracker, "sft", steps))
        out_dir = save_trained_model(cfg, "sft", spec, learner.export_weights(), run_dir, held_out, streams)
    finally:
        close_all([tracker.close, learner.close])
    plot_training_curves(run_dir / "metrics.jsonl", run_dir / "sft_curve.png", f"SFT {cfg.env.name} {spec.name}",
                         panels=SFT_PANELS)
    return finish(run_dir, "sft", {"model": str(out_dir), "trajectories": len(data), "steps": done})
