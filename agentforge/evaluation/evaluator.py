"""The evaluator: one engine and env pool playing the held-out tasks, one table row per sampling config, every row
from the same sampling seed (so rows and reruns compare)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from omegaconf import DictConfig

from agentforge.algorithms import make_algorithm
from agentforge.builders import (
    build_engine,
    build_model_spec,
    build_pool,
    build_rollout_context,
    build_workflow,
    without_name,
)
from agentforge.evaluation.checkpoint_source import CheckpointSource, check_compatible, load_checkpoint_weights
from agentforge.evaluation.settings import EvalSettings
from agentforge.rollout.metrics import rollout_summary
from agentforge.rollout.workflow import RolloutContext, RolloutResult, RolloutStats
from agentforge.tasks import held_out_tasks
from agentforge.tracking.progress import console, rollout_progress
from agentforge.types import Group, SamplingConfig


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


def default_seed(cfg: DictConfig) -> int:
    """The trainer's eval seed, so `agentforge eval` with the trainer's eval settings samples what it sampled."""
    from agentforge.tasks import iteration_seed

    return iteration_seed(int(cfg.seed), 0, salt=1)


def row_metrics(groups: list[Group], stats: RolloutStats, descriptors: list[str],
                workflow_metrics: dict[str, float] | None = None) -> dict[str, float]:
    """The rollout summary plus D^pair / D^dpp (raw) and contributing-group counts per descriptor."""
    from agentforge.algorithms.diversity import group_diversity

    metrics = rollout_summary(groups, stats, workflow_metrics)
    if not any(t.won for g in groups for t in g.trajectories):
        metrics["mean_success_length"] = math.nan  # no successful trajectory: undefined, not 0
        metrics["tokens_per_success"] = math.nan
    metrics.update(group_diversity(groups, descriptors, successful_only=True))
    return metrics


class Evaluator:
    """Owns the engine and env pool of one evaluation; `row(...)` plays the eval tasks with one sampling config."""

    def __init__(self, cfg: DictConfig, settings: EvalSettings, source: CheckpointSource | None) -> None:
        self.cfg = cfg
        self.settings = settings
        spec = build_model_spec(cfg)
        if source is not None and source.kind == "model":
            spec = replace(spec, path=str(source.weights_dir), name=f"{spec.name}@{source.weights_dir}")
        elif source is not None:
            check_compatible(source, spec.path)
        self.spec = spec
        self.seed = default_seed(cfg) if settings.seed is None else int(settings.seed)
        self.tasks = held_out_tasks(str(cfg.env.name), without_name(cfg.env), int(settings.num_tasks), settings.split,
                                    int(settings.seed_offset))
        console.print(f"[bold]eval[/] {source.describe() if source else 'the recipe model as shipped'} · model "
                      f"{spec.name} · engine {cfg.engine.name} · env {cfg.env.name} · {len(self.tasks)} tasks × "
                      f"{settings.samples_per_task} at T={settings.temperature}")
        self.engine = build_engine(cfg, spec)
        self.pool = None
        try:
            if source is not None and source.kind == "checkpoint":
                self.engine.update_weights(load_checkpoint_weights(source, spec.path))
            self.pool = build_pool(cfg)
            self.ctx = build_rollout_context(cfg, self.engine, self.pool)
            self.workflow = build_workflow(cfg, make_algorithm(cfg.algorithm), "eval")
        except BaseException:
            self.close()
            raise

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
        return EvalRow(name, sampling, row_metrics(result.groups, result.stats, descriptors, result.metrics),
                       result.groups)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self.engine is not None:
            self.engine.close()
            self.engine = None
