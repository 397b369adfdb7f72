"""Rejection fine-tuning (RFT) cold start, T2PO's B.1: roll out the policy as it is, keep its high-scoring
trajectories, one epoch of SFT on them with the same learner.

The data are the policy's own turns, exactly as the engine produced them (token ids; tokens a decoding
intervention forced stay out of the loss). Kept: trajectories whose score (`rft.score`: `won` = 1/0, or `return` =
the env's rewards summed, without the agent's invalid-turn penalties) reaches `rft.threshold`, and, with
`rft.require_valid`, every turn of which is well formed (the paper: RFT is there to filter malformed actions).

Used by `agentforge rft recipe=...` (writes `<run dir>/model` for `model.init_from`) and by the trainer's
`trainer.warm_start: rft` (or `[expert, rft]`: the expert SFT first, then RFT from the result).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from agentforge.errors import ConfigError
from agentforge.learner import Learner
from agentforge.rollout.workflow import ProgressCallback, RolloutContext, RolloutWorkflow
from agentforge.tasks import task_sampler
from agentforge.tasks.held_out import TrainingStreams, earlier_training, run_record, write_record
from agentforge.tracking.progress import console
from agentforge.training.sft import epoch_steps, run_sft_epochs
from agentforge.types import Trajectory

SCORES = ("won", "return")


@dataclass
class RFTData:
    """The kept trajectories and what the filter saw."""

    kept: list[Trajectory]
    played: int
    won: int
    rollout_seconds: float

    @property
    def summary(self) -> dict[str, float]:
        return {"rft/played": self.played, "rft/kept": len(self.kept), "rft/won": self.won,
                "rft/kept_rate": len(self.kept) / self.played if self.played else 0.0,
                "rft/kept_turns": sum(t.length for t in self.kept), "time/rft_rollout": self.rollout_seconds}


def check_rft_config(rft: Any) -> None:
    """Reject settings that cannot work, before anything starts."""
    if str(rft.score) not in SCORES:
        raise ConfigError(f"rft.score={rft.score!r} is not one of {', '.join(SCORES)}")
    for key in ("num_tasks", "group_size", "epochs", "batch_size"):
        if int(getattr(rft, key)) < 1:
            raise ConfigError(f"rft.{key} must be >= 1, got {getattr(rft, key)}")


def trajectory_score(trajectory: Trajectory, score: str) -> float:
    if score == "won":
        return float(trajectory.won)
    return float(sum(turn.env_reward for turn in trajectory.turns))


def rft_dataset(rft: Any, env_name: str, env_options: dict[str, Any], ctx: RolloutContext,
                workflow: RolloutWorkflow, on_progress: ProgressCallback | None = None,
                streams: TrainingStreams | None = None) -> RFTData:
    """Roll out `rft.num_tasks` train tasks × `rft.group_size` with the current weights and filter them (`rft`: the
    `rft` section, typed or as composed); `streams`: the run seed's tasks, held-out content skipped."""
    check_rft_config(rft)
    streams = streams or TrainingStreams()
    tasks = task_sampler(env_name, env_options, "train", int(rft.seed_offset), streams.stream,
                         streams.admit).sample(int(rft.num_tasks))
    if getattr(rft, "temperature", None) is not None:
        ctx = ctx.with_sampling(replace(ctx.config.sampling, temperature=float(rft.temperature)))
    started = time.perf_counter()
    result = workflow.run(ctx, tasks, int(rft.group_size), on_progress)
    played = [t for g in result.groups for t in g.trajectories]
    threshold, score = float(rft.threshold), str(rft.score)
    kept = [t for t in played if trajectory_score(t, score) >= threshold
            and (not rft.require_valid or all(turn.valid for turn in t.turns)) and t.turns]
    data = RFTData(kept, len(played), sum(t.won for t in played), time.perf_counter() - started)
    if not kept:
        raise ConfigError(
            f"RFT kept none of {len(played)} trajectories ({data.won} won; rft.score={score}, rft.threshold="
            f"{threshold}, rft.require_valid={bool(rft.require_valid)}): the policy is too weak to filter from. "
            "Warm-start it on expert play first (trainer.warm_start=[expert,rft]), lower rft.threshold, or raise "
            "rft.num_tasks / rft.group_size")
    return data


def rft_steps(rft: Any, kept: int) -> int:
    return epoch_steps(rft, kept)


def rft_step_budget(rft: Any) -> int:
    """An upper bound on RFT's optimizer steps (every rollout kept), for the learner's schedule."""
    return rft_steps(rft, int(rft.num_tasks) * int(rft.group_size))


def run_rft_epochs(rft: Any, seed: int, learner: Learner, data: RFTData,
                   on_step: Callable[[int, dict[str, float]], None]) -> int:
    return run_sft_epochs(rft, seed, learner, data.kept, on_step)


def run_rft(cfg: DictConfig) -> dict[str, Any]:
    """`agentforge rft recipe=...`: roll out the recipe's policy, keep the best, one SFT epoch, write the model."""
    from agentforge.builders import (
        build_held_out,
        build_model_spec,
        build_rollout_stack,
        build_training_streams,
        plain,
        prepare_run_dir,
        without_name,
    )
    from agentforge.learner import LearnerConfig
    from agentforge.tracking.tracker import RunTracker
    from agentforge.training.preflight import preflight
    from agentforge.training.sft import save_full_model

    check_rft_config(cfg.rft)
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
