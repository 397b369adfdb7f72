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

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from agentforge.errors import ConfigError
from agentforge.learner import Learner
from agentforge.rollout.workflow import ProgressCallback, RolloutContext, RolloutWorkflow
from agentforge.tasks import task_sampler
from agentforge.tasks.held_out import TrainingStreams
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
