"""`agentforge rft recipe=...`: roll out the recipe's policy, keep the best (`training.rft`), SFT on them, a model."""

from __future__ import annotations

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
from agentforge.commands.trained_model import finish, save_trained_model, step_logger
from agentforge.learner import Learner, LearnerConfig
from agentforge.reliability.closing import close_all
from agentforge.tracking.progress import console
from agentforge.tracking.tracker import RunTracker
from agentforge.training.rft import check_rft_config, rft_dataset, rft_steps, run_rft_epochs


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
        trained = student_spec(cfg, spec)  # the model that played, or the student it teaches
        learner = Learner(trained.path, LearnerConfig.from_mapping({**plain(cfg.learner), "total_steps": steps}))
        closers.insert(0, learner.close)
        done = run_rft_epochs(cfg.rft, int(cfg.seed), learner, data, step_logger(tracker, "rft", steps))
        out_dir = save_trained_model(cfg, "rft", trained, learner.export_weights(), run_dir, held_out, streams)
    finally:  # the learner, the rollout stack (a gateway's server too), the tracker, the keyer
        close_all(closers)
    return finish(run_dir, "rft", {"model": str(out_dir), "steps": done, "played_by": spec.name,
                                   "trained": trained.name, **data.summary})


def student_spec(cfg: DictConfig, spec: Any) -> Any:
    """`rft.student`: the model SFT trains on the kept rollouts of `spec` (its teacher), with the same tokenizer;
    else `spec` itself (rejection fine-tuning proper)."""
    student = (cfg.get("rft") or {}).get("student")
    if not student:
        return spec
    from dataclasses import replace
    from pathlib import Path

    from agentforge.errors import ConfigError
    from agentforge.learner.teacher import check_same_tokenizer

    if not (Path(str(student)) / "config.json").exists():
        raise ConfigError(f"rft.student={student} is not an HF model folder (no config.json); point it at one (an "
                          "`agentforge sft` or `agentforge export` output, or a downloaded model)")
    check_same_tokenizer(student, spec.path)
    return replace(spec, path=str(student), name=f"student@{student}")


def _print_progress(done: int, total: int, stats: Any) -> None:
    console.print(f"  rft rollout: {done}/{total} episodes · {stats.generated_tokens} tokens")
