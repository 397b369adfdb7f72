"""`agentforge eval recipe=... checkpoint=...`: the TJPO paper's evaluation of one checkpoint.

N_eval samples per held-out prompt at temperature 0.4; success rate, mean reward, mean successful length,
invalid-action rate, and D^pair / D^dpp of every descriptor over each prompt's successful rollouts (a cross-metric
table: optimise one descriptor, report all). Decoding-only baselines rerun the same weights with one sampling option
changed (presence or repetition penalty: the paper's GiGPO+PP and GiGPO+RP rows). On ALFWorld, `eval.interventions`
adds Standard / User Constraints / Disruption success on the intervention cases.

Every row restarts the engine's sampling stream from the same seed (by default the trainer's eval seed), so a rerun
gives the same numbers, and an eval with the trainer's eval settings reproduces the numbers the trainer logged.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentforge.agent.loop import AgentLoop, RolloutStats
from agentforge.builders import build_agent_loop, build_engine, build_model_spec, build_pool, plain, prepare_run_dir
from agentforge.errors import ConfigError
from agentforge.eval_checkpoint import CheckpointSource, check_compatible, load_checkpoint_weights, resolve_checkpoint
from agentforge.metrics import rollout_summary
from agentforge.progress import console, rollout_progress
from agentforge.tasks import SPLIT_SEED_BASE, TaskSampler
from agentforge.types import Group, SamplingConfig

# baseline name -> (sampling option it changes, the eval setting holding its value, the row suffix)
BASELINES: dict[str, tuple[str, str, str]] = {
    "pp": ("presence_penalty", "presence_penalty", "PP"),
    "rp": ("repetition_penalty", "repetition_penalty", "RP"),
}
ALGORITHM_LABELS = {"grpo": "GRPO", "gigpo": "GiGPO", "tjpo": "TJPO"}


@dataclass(frozen=True)
class EvalSettings:
    """The `eval:` config block, checked before anything expensive starts."""

    num_tasks: int = 128
    samples_per_task: int = 8
    temperature: float = 0.4
    split: str = "eval"
    seed_offset: int = 0
    seed: int | None = None
    descriptors: list[str] | str = "auto"
    baselines: list[str] = field(default_factory=list)
    presence_penalty: float = 0.5
    repetition_penalty: float = 1.05
    interventions: bool = False
    intervention_cases: str = "bundled"
    intervention_samples: int | None = None
    label: str | None = None
    output: str | None = None

    @classmethod
    def from_config(cls, node: Any) -> EvalSettings:
        values = dict(plain(node) or {})
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown eval option(s) {unknown}; valid options: {', '.join(sorted(known))}")
        if isinstance(values.get("baselines"), str):
            values["baselines"] = [values["baselines"]]
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        if int(self.num_tasks) < 1:
            raise ConfigError(f"eval.num_tasks={self.num_tasks} must be >= 1")
        if int(self.samples_per_task) < 1:
            raise ConfigError(f"eval.samples_per_task={self.samples_per_task} must be >= 1 (diversity needs >= 2)")
        if float(self.temperature) < 0:
            raise ConfigError(f"eval.temperature={self.temperature} must be >= 0")
        if self.split not in SPLIT_SEED_BASE:
            raise ConfigError(f"eval.split={self.split!r} is unknown; valid splits: {', '.join(SPLIT_SEED_BASE)}")
        bad = [b for b in self.baselines if b not in BASELINES]
        if bad:
            raise ConfigError(f"unknown eval baseline(s) {bad}; valid baselines: {', '.join(BASELINES)} (pp: presence "
                              "penalty eval.presence_penalty, rp: repetition penalty eval.repetition_penalty)")
        if self.intervention_samples is not None and int(self.intervention_samples) < 1:
            raise ConfigError(f"eval.intervention_samples={self.intervention_samples} must be >= 1 (or null: "
                              "eval.samples_per_task)")
        if float(self.repetition_penalty) <= 0:
            raise ConfigError(f"eval.repetition_penalty={self.repetition_penalty} must be > 0 (1.0 is off)")


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
    from agentforge.trainer import iteration_seed

    return iteration_seed(int(cfg.seed), 0, salt=1)


def row_metrics(groups: list[Group], stats: RolloutStats, descriptors: list[str]) -> dict[str, float]:
    """The rollout summary plus D^pair / D^dpp (raw) and contributing-group counts per descriptor."""
    from agentforge.algorithms.diversity import group_diversity

    metrics = rollout_summary(groups, stats)
    if not any(t.won for g in groups for t in g.trajectories):
        metrics["mean_success_length"] = math.nan  # no successful trajectory: undefined, not 0
    metrics.update(group_diversity(groups, descriptors, successful_only=True))
    return metrics


def policy_label(settings: EvalSettings, source: CheckpointSource | None, cfg: DictConfig) -> str:
    """The main row's name: eval.label, else the trained run's algorithm (with TJPO's descriptor and λ)."""
    if settings.label:
        return str(settings.label)
    if source is None:
        return "base"
    algorithm: Any = None
    if source.run_dir is not None and (source.run_dir / "config.yaml").exists():
        algorithm = OmegaConf.load(source.run_dir / "config.yaml").get("algorithm")
    if algorithm is None:
        return "policy"
    name = str(algorithm.get("name", "policy"))
    label = ALGORITHM_LABELS.get(name, name)
    if name == "tjpo":
        label += f" ({algorithm.get('descriptor')}, {algorithm.get('functional')}, λ={algorithm.get('lambda')})"
    return label


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
        self.tasks = TaskSampler(str(cfg.env.name), settings.split, int(settings.seed_offset)).sample(
            int(settings.num_tasks))
        console.print(f"[bold]eval[/] {source.describe() if source else 'the recipe model as shipped'} · model "
                      f"{spec.name} · engine {cfg.engine.name} · env {cfg.env.name} · {len(self.tasks)} tasks × "
                      f"{settings.samples_per_task} at T={settings.temperature}")
        self.engine = build_engine(cfg, spec)
        self.pool = None
        try:
            if source is not None and source.kind == "checkpoint":
                self.engine.update_weights(load_checkpoint_weights(source, spec.path))
            self.pool = build_pool(cfg)
            self.loop = build_agent_loop(cfg, self.engine, self.pool)
        except BaseException:
            self.close()
            raise

    @property
    def sampling(self) -> SamplingConfig:
        return replace(self.loop.config.sampling, temperature=float(self.settings.temperature))

    def play(self, loop: AgentLoop, tasks: list[Any], samples: int, label: str) -> tuple[list[Group], RolloutStats]:
        """Roll out from the fixed seed, so every row (and every rerun) starts from the same sampling stream."""
        self.engine.reseed(self.seed)
        with rollout_progress(label, len(tasks) * samples) as on_progress:
            return loop.run(tasks, samples, on_progress)

    def row(self, name: str, sampling: SamplingConfig, descriptors: list[str]) -> EvalRow:
        loop = AgentLoop(self.engine, self.pool, self.loop.template, replace(self.loop.config, sampling=sampling),
                         self.loop.intervention)
        groups, stats = self.play(loop, self.tasks, int(self.settings.samples_per_task), f"eval {name}")
        return EvalRow(name, sampling, row_metrics(groups, stats, descriptors), groups)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def baseline_sampling(base: SamplingConfig, baseline: str, settings: EvalSettings) -> SamplingConfig:
    option, setting, _ = BASELINES[baseline]
    return replace(base, **{option: float(getattr(settings, setting))})


def output_dir(cfg: DictConfig, settings: EvalSettings) -> Path:
    folder = Path(str(settings.output)) if settings.output else Path(str(cfg.run_dir))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_eval(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate `checkpoint=` (or the recipe's model) and write eval.json, eval.md and trajectories.jsonl."""
    from agentforge.eval_report import eval_markdown, eval_table, write_eval_outputs

    settings = EvalSettings.from_config(cfg.get("eval"))
    descriptors = resolve_descriptors(settings.descriptors, str(cfg.env.name), cfg.algorithm.get("descriptor"))
    if settings.interventions:
        from agentforge.eval_interventions import check_intervention_env

        check_intervention_env(str(cfg.env.name), str(settings.intervention_cases))
    source = resolve_checkpoint(cfg.get("checkpoint"))
    prepare_run_dir(cfg)
    label = policy_label(settings, source, cfg)
    evaluator = Evaluator(cfg, settings, source)
    try:
        rows = [evaluator.row(label, evaluator.sampling, descriptors)]
        for baseline in settings.baselines:
            name = f"{label}+{BASELINES[baseline][2]}"
            rows.append(evaluator.row(name, baseline_sampling(evaluator.sampling, baseline, settings), descriptors))
        interventions, intervention_groups = None, {}
        if settings.interventions:
            from agentforge.eval_interventions import run_interventions

            interventions, intervention_groups = run_interventions(evaluator, settings, label)
    finally:
        evaluator.close()
    report = {
        "checkpoint": source.to_json() if source else None,
        "model": evaluator.spec.path,
        "env": str(cfg.env.name),
        "tasks": {"split": settings.split, "num_tasks": len(evaluator.tasks), "first_seed": evaluator.tasks[0].seed,
                  "last_seed": evaluator.tasks[-1].seed},
        "samples_per_task": int(settings.samples_per_task),
        "temperature": float(settings.temperature),
        "engine_seed": evaluator.seed,
        "descriptors": descriptors,
        "rows": [{"name": r.name, "sampling": asdict(r.sampling), "metrics": r.metrics} for r in rows],
        "interventions": interventions,
        "settings": asdict(settings),
        "config": plain(cfg),
    }
    folder = output_dir(cfg, settings)
    paths = write_eval_outputs(folder, report, rows[0].groups, intervention_groups)
    console.print(eval_table(report))
    if interventions:
        from agentforge.eval_report import intervention_table

        console.print(intervention_table(interventions))
    console.print("\n".join(f"{k}: {v}" for k, v in paths.items()))
    report["markdown"] = eval_markdown(report)
    return report

