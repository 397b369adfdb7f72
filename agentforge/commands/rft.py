"""`agentforge rft recipe=...`: roll out the recipe's policy, keep the best (`training.rft`), SFT on them, a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from agentforge.commands.builders import (
    build_held_out,
    build_model_spec,
    build_rollout_stack,
    build_training_streams,
    plain,
    prepare_run_dir,
    without_name,
)
from agentforge.commands.preflight import preflight
from agentforge.learner import Learner, LearnerConfig
from agentforge.tasks.held_out import earlier_training, run_record, write_record
from agentforge.tracking.progress import console
from agentforge.tracking.tracker import RunTracker
from agentforge.training.rft import check_rft_config, rft_dataset, rft_steps, run_rft_epochs
from agentforge.training.sft import save_full_model


def run_rft(cfg: DictConfig, checked: bool = False) -> dict[str, Any]:
    """`agentforge rft recipe=...`: roll out the recipe's policy, keep the best, one SFT epoch, write the model."""
    check_rft_config(cfg.rft)
    if not checked:  # `agentforge rft` has checked it (the CLI checks every command first)
        preflight(cfg)
    run_dir = prepare_run_dir(cfg)
    spec = build_model_spec(cfg)
    held_out, keyer = build_held_out(cfg, {})
    streams = build_training_streams(cfg, held_out, keyer)
    tracker = RunTracker(run_dir, {**plain(cfg.logger), "wandb": False}, plain(cfg), resume=False)
    closers = [tracker.close, keyer.close]
    try:
        stack = build_rollout_stack(cfg, spec, ["rollout"])
        closers.insert(0, stack.close)
        console.print(f"[bold]rft[/] {cfg.rft.num_tasks} tasks x {cfg.rft.group_size} rollouts of {spec.name} on "
                      f"{cfg.env.name}, keeping {cfg.rft.score} >= {cfg.rft.threshold}")
        data = rft_dataset(cfg.rft, str(cfg.env.name), without_name(cfg.env), stack.ctx, stack.workflow("rollout"),
                           _print_progress, streams)
        steps = rft_steps(cfg.rft, len(data.kept))
        console.print(f"kept {len(data.kept)} of {data.played} trajectories ({data.won} won) · {steps} SFT steps")
        learner = Learner(spec.path, LearnerConfig.from_mapping({**plain(cfg.learner), "total_steps": steps}))
        closers.insert(0, learner.close)

        def on_step(step: int, metrics: dict[str, float]) -> None:
            tracker.log(step, {f"rft/{k}": v for k, v in metrics.items()})
            console.print(f"rft step {step}/{steps} loss {metrics.get('loss', float('nan')):.4f}")

        done = run_rft_epochs(cfg.rft, int(cfg.seed), learner, data, on_step)
        out_dir = Path(cfg.rft.output) if cfg.rft.get("output") else run_dir / "model"
        save_full_model(spec, learner.export_weights(), out_dir)
        earlier = earlier_training(cfg.model.get("init_from"))
        write_record((run_dir, out_dir), run_record(held_out, streams, {}, earlier))
    finally:
        for close in closers:  # the learner, the rollout stack (a gateway's server too), the tracker, the keyer
            close()
    summary = {"model": str(out_dir), "steps": done, **data.summary}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(f"RFT model: {out_dir}\nuse it with: agentforge train recipe=... model.init_from={out_dir}")
    return summary


def _print_progress(done: int, total: int, stats: Any) -> None:
    console.print(f"  rft rollout: {done}/{total} episodes · {stats.generated_tokens} tokens")
