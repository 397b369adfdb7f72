"""The warm starts before RL (`trainer.warm_start`): SFT on expert play, RFT on the policy's own best rollouts.

Each trains the run's learner and then pushes its weights to the engine, so RL starts from the warmed policy; the
steps count into the learner's LR schedule (`step_budget`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentforge.schema.groups import RFTSchema, SFTSchema
from agentforge.tracking.progress import TrainProgress, console
from agentforge.training.rft import rft_dataset, rft_step_budget, rft_steps, run_rft_epochs
from agentforge.training.sft import ExpertPlay, epoch_steps, expert_dataset, run_sft_epochs

WeightSync = Callable[[], float]


class WarmStart:
    """The modes `trainer.warm_start` names, in order, with their sections (`sft`, `rft`) and what expert data are
    played in; the `agentforge sft` / `agentforge rft` commands run the same steps on their own."""

    def __init__(self, modes: list[str], sft: SFTSchema, rft: RFTSchema, play: ExpertPlay, seed: int,
                 rollout_workflow: Callable[[], Any] | None = None) -> None:
        self.modes, self.sft, self.rft, self.play, self.seed = modes, sft, rft, play, seed
        self.rollout_workflow = rollout_workflow  # RFT's: the algorithm's plain rollout, built when RFT starts

    def run(self, learner: Any, engine: Any, ctx: Any, sync_weights: WeightSync,
            progress: TrainProgress | None = None) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for mode in self.modes:
            if mode == "expert":
                metrics.update(self.expert(learner, engine, sync_weights, progress))
            else:
                metrics.update(self.rejection(learner, ctx, sync_weights, progress))
        learner.reset_reference()  # KL pulls toward the policy RL starts from, not the model as loaded
        return metrics

    def rejection(self, learner: Any, ctx: Any, sync_weights: WeightSync,
                  progress: TrainProgress | None = None) -> dict[str, float]:
        """RFT (T2PO's cold start): roll out the current policy, keep its best trajectories, one SFT epoch."""
        if self.rollout_workflow is None:
            raise ValueError("an RFT warm start needs the rollout workflow to play the policy with")
        started = time.perf_counter()
        callback = progress.rollout_callback("rft rollout") if progress else None
        data = rft_dataset(self.rft, self.play.env_name, self.play.env_options, ctx, self.rollout_workflow(),
                           callback, self.play.streams)
        steps = rft_steps(self.rft, len(data.kept))
        console.print(f"[bold]warm start (rft)[/]: kept {len(data.kept)} of {data.played} rollouts ({data.won} won), "
                      f"{steps} steps")
        last: dict[str, float] = {}
        run_rft_epochs(self.rft, self.seed, learner, data, sft_step_reporter("rft", steps, progress, last))
        sync_weights()
        return {**data.summary, "rft/loss": last.get("loss", float("nan")), "rft/steps": steps,
                "time/rft": time.perf_counter() - started}

    def expert(self, learner: Any, engine: Any, sync_weights: WeightSync,
               progress: TrainProgress | None = None) -> dict[str, float]:
        """SFT on expert trajectories with the same learner, then sync the engine."""
        data = expert_dataset(self.play, self.sft, engine.tokenizer)
        steps = epoch_steps(self.sft, len(data))
        console.print(f"[bold]warm start[/]: SFT on {len(data)} expert trajectories, {steps} steps")
        last: dict[str, float] = {}
        started = time.perf_counter()
        run_sft_epochs(self.sft, self.seed, learner, data, sft_step_reporter("sft", steps, progress, last))
        sync_weights()
        return {"sft/loss": last.get("loss", float("nan")), "sft/steps": steps, "sft/trajectories": len(data),
                "time/warm_start": time.perf_counter() - started}


def step_budget(modes: list[str], sft: SFTSchema, rft: RFTSchema) -> int:
    """An upper bound on the warm starts' optimizer steps (the learner's LR schedule spans them and RL)."""
    steps = 0
    if "expert" in modes:
        steps += epoch_steps(sft, int(sft.num_tasks))
    if "rft" in modes:
        steps += rft_step_budget(rft)
    return steps


def sft_step_reporter(label: str, steps: int, progress: TrainProgress | None,
                      last: dict[str, float]) -> Callable[[int, dict[str, float]], None]:
    """A warm start's per-step callback: a console line per step, the progress phase, the last metrics kept."""
    if progress:
        progress.phase(f"warm start: {label.upper()} step 1/{steps}")

    def on_step(step: int, metrics: dict[str, float]) -> None:
        last.update(metrics)
        console.print(f"  {label} step {step}/{steps} · loss {metrics.get('loss', float('nan')):.4f}")
        if progress and step < steps:
            progress.phase(f"warm start: {label.upper()} step {step + 1}/{steps}")

    return on_step
