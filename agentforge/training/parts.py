"""What a `Trainer` is handed: its settings (its own config section, typed) and its parts, already built.

Why: the training loop used to receive the whole composed config and build its engine, env pool, learner and task
samplers itself, so the config travelled from the loop into every module. Now the command layer
(`commands/train.py`) reads the config once and builds the parts; the loop's signature says what it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentforge.schema.groups import TrainerSchema

if TYPE_CHECKING:
    from agentforge.learner import Learner
    from agentforge.objective.dynamic_sampling import DynamicSampling
    from agentforge.reliability.checkpoint import CheckpointManager
    from agentforge.rollout.stack import RolloutStack
    from agentforge.rollout.workflow import RolloutContext
    from agentforge.tasks.held_out import HeldOut, TrainingStreams
    from agentforge.tracking.tracker import RunTracker
    from agentforge.training.warm_start import WarmStart
    from agentforge.types import Task

Floor = Callable[[list["Task"]], dict[str, list[bool]]]  # eval tasks -> per task, whether each random episode won


@dataclass(frozen=True)
class TrainerSettings:
    """The loop's own values: the `trainer` section (typed by its schema) and the few run-wide ones it reads."""

    trainer: TrainerSchema
    seed: int  # the run's seed: each iteration's rollout is seeded from (seed, iteration)
    max_turns: int  # agent.max_turns, for the progress display
    title: str  # "<algorithm> · <env> · <model>", for the plot
    max_staleness: int = 0  # 0: synchronous; k >= 1: rollout up to k weight versions ahead (training/asynchronous.py)
    engine_sleeps: bool = False  # colocated replicas / sleep mode give their memory to the learner during the update
    push_from_learner_ranks: bool = False  # replicas take new weights from learner rank 0, not through the driver


@dataclass
class TrainerParts:
    """The parts of one run, built by the command layer; the trainer drives them and closes them."""

    run_dir: Path
    resuming: bool  # run_dir holds the checkpoints to continue from
    stack: RolloutStack  # the engine, the env pool, the context and the train and eval workflows
    eval_ctx: RolloutContext  # the stack's context at the eval temperature
    algorithm: Any
    eval_descriptors: list[str]  # whose diversity each eval reports
    learner: Learner
    sampler: Any  # the training task source (a TaskSampler, MixedTaskSampler or CurriculumSampler)
    eval_tasks: list[Task]
    checkpoints: CheckpointManager
    tracker: RunTracker
    dynamic_sampling: DynamicSampling
    warm_start: WarmStart | None = None  # trainer.warm_start
    floor: Floor | None = None  # the random-admissible-action floor (trainer.eval_floor), None where there is none
    test_tasks: list[Task] | None = None  # trainer.test_tasks: the claim's tasks, evaluated at the start and the end
    held_out: HeldOut | None = None  # the reserved held-out sets the tasks above come from (tasks/held_out.py)
    streams: TrainingStreams | None = None  # what the training streams skip and record
    earlier_trained: set[str] | None = None  # a warm start's trained task digests, from its own run (model.init_from)
    # a held-out task's solution length (evaluation/depth.py): evals split success by it; None without an expert
    task_depth: Callable[[Task], int | None] | None = None
    # self-distillation's privileged context of a task (the env expert's solution), for an algorithm whose teacher is
    # the policy itself (algorithm=opd teacher=self); None otherwise
    privileged_context: Callable[[Task], str | None] | None = None
    closers: tuple[Callable[[], None], ...] = ()  # more to close at the end (the task keyer: saves its cache)
