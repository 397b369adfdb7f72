"""The evaluator: one engine and env pool playing the held-out tasks, one table row per sampling config, every row
from the same sampling seed (so rows and reruns compare)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from agentforge.evaluation.settings import EvalSettings
from agentforge.models.loading import ModelSpec
from agentforge.rollout.metrics import rollout_summary
from agentforge.rollout.workflow import RolloutContext, RolloutResult, RolloutStats
from agentforge.tracking.progress import rollout_progress
from agentforge.types import Group, SamplingConfig, Task

if TYPE_CHECKING:
    from agentforge.rollout.stack import RolloutStack


@dataclass
class EvalRow:
    """One line of the table: a policy (or a decoding baseline of it) and its metrics."""

    name: str
    sampling: SamplingConfig
    metrics: dict[str, float]
    groups: list[Group] = field(default_factory=list, repr=False)


def resolve_descriptors(setting: list[str] | str | None, env_name: str, optimised: str | None = None) -> list[str]:
    """`auto` → the env's built-in descriptors plus the one the recipe optimises; a list is checked name by name."""
    from agentforge.algorithms.descriptors import descriptors_for_env, get_descriptor

    if setting in (None, "auto"):
        names = descriptors_for_env(env_name)
        if optimised and optimised not in names and env_name.startswith(get_descriptor(optimised).env or ""):
            names.append(optimised)  # a user's descriptor (no env), or a built-in of this env family
    elif isinstance(setting, str):
        names = [setting]
    else:
        names = [str(n) for n in setting]
    for name in names:
        get_descriptor(name)  # an unknown name or unimportable path fails here, listing the registered ones
    return names


def default_seed(seed: int) -> int:
    """The trainer's eval seed for a run `seed`, so `agentforge eval` with the trainer's eval settings samples what
    it sampled."""
    from agentforge.tasks import iteration_seed

    return iteration_seed(int(seed), 0, salt=1)


def row_metrics(groups: list[Group], stats: RolloutStats, descriptors: list[str],
                workflow_metrics: dict[str, float] | None = None, task_depth: Any = None) -> dict[str, float]:
    """The rollout summary plus D^pair / D^dpp (raw) and contributing-group counts per descriptor, and success by
    solution length where the env has an expert (`task_depth`)."""
    from agentforge.algorithms.diversity import group_diversity

    metrics = rollout_summary(groups, stats, workflow_metrics)
    if not any(t.won for g in groups for t in g.trajectories):
        metrics["mean_success_length"] = math.nan  # no successful trajectory: undefined, not 0
        metrics["tokens_per_success"] = math.nan
    metrics.update(group_diversity(groups, descriptors, successful_only=True))
    if task_depth is not None:
        from agentforge.evaluation.depth import success_by_depth

        metrics.update(success_by_depth(groups, task_depth))
    return metrics


class Evaluator:
    """Plays the eval tasks on one engine and env pool, one row per sampling config (`row(...)`); built by
    `evaluation.evaluate.build_evaluator` (the eval command's layer), it closes the rollout stack it is handed."""

    def __init__(self, settings: EvalSettings, spec: ModelSpec, seed: int, tasks: list[Task], stack: RolloutStack,
                 held_out: Any = None, task_depth: Any = None) -> None:
        self.settings, self.spec, self.seed, self.tasks = settings, spec, seed, tasks
        self.stack = stack
        self.engine, self.pool, self.ctx, self.workflow = stack.engine, stack.pool, stack.ctx, stack.workflow("eval")
        self.held_out = held_out  # the reserved held-out sets the tasks come from (agentforge/tasks/held_out.py)
        self.task_depth = task_depth  # a task's solution length (evaluation/depth.py), None without an expert

    @property
    def sampling(self) -> SamplingConfig:
        return replace(self.ctx.config.sampling, temperature=float(self.settings.temperature))

    def play(self, ctx: RolloutContext, tasks: list[Any], samples: int, label: str) -> RolloutResult:
        """Roll out from the fixed seed, so every row (and every rerun) starts from the same sampling stream."""
        self.engine.reseed(self.seed)
        with rollout_progress(label, len(tasks) * samples, ctx.config.max_turns) as on_progress:
            return self.workflow.run(ctx, tasks, samples, on_progress)

    def row(self, name: str, sampling: SamplingConfig, descriptors: list[str]) -> EvalRow:
        result = self.play(self.ctx.with_sampling(sampling), self.tasks, int(self.settings.samples_per_task),
                           f"eval {name}")
        return EvalRow(name, sampling, row_metrics(result.groups, result.stats, descriptors, result.metrics,
                                                   self.task_depth), result.groups)

    def close(self) -> None:
        """The engine, the pool and the eval workflow (a gateway's server with env=agent), each once."""
        self.stack.close()
