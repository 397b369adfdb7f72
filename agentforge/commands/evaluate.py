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

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig

from agentforge.commands.builders import (
    build_held_out,
    build_model_spec,
    build_rollout_stack,
    build_task_depth,
    plain,
    prepare_run_dir,
    without_name,
)
from agentforge.evaluation.checkpoint_source import (
    CheckpointSource,
    check_compatible,
    load_checkpoint_weights,
    policy_weights,
    resolve_checkpoint,
    resolve_compare,
)
from agentforge.evaluation.evaluator import Evaluator, default_seed, resolve_descriptors
from agentforge.evaluation.settings import BASELINES, EvalSettings, baseline_sampling
from agentforge.evaluation.summary import view_hint
from agentforge.rollout.metrics import episode_outcomes
from agentforge.tracking.progress import console

ALGORITHM_LABELS = {"grpo": "GRPO", "gigpo": "GiGPO", "tjpo": "TJPO"}


def policy_label(settings: EvalSettings, source: CheckpointSource | None, cfg: DictConfig) -> str:
    """The main row's name: eval.label, else the trained run's algorithm (with TJPO's descriptor and λ)."""
    if settings.label:
        return str(settings.label)
    if source is None:
        return "base"
    algorithm: Any = None
    if source.run_dir is not None and (source.run_dir / "config.yaml").exists():
        # read as plain YAML: a foreign run's `${oc.env:...}` must not put this machine's secrets into a label
        algorithm = (yaml.safe_load((source.run_dir / "config.yaml").read_text()) or {}).get("algorithm")
        algorithm = algorithm if isinstance(algorithm, dict) else None
    if algorithm is None:
        return "policy"
    name = str(algorithm.get("name", "policy"))
    label = ALGORITHM_LABELS.get(name, name)
    if name == "tjpo":
        label += f" ({algorithm.get('descriptor')}, {algorithm.get('functional')}, λ={algorithm.get('lambda')})"
    return label


def floor_rows(cfg: DictConfig, evaluator: Evaluator, settings: EvalSettings) -> list[dict[str, Any]]:
    """The random floor as a row (a uniformly random admissible action on the same tasks); none where the env lists
    no admissible actions."""
    from agentforge.evaluation.floor import NoFloor, random_floor

    if cfg.env.name == "agent" or not cfg.trainer.get("eval_floor", True):
        return []
    try:
        floor = random_floor(str(cfg.env.name), without_name(cfg.env), evaluator.tasks, int(cfg.agent.max_turns),
                             int(settings.samples_per_task), int(cfg.seed))
    except NoFloor:
        return []
    played = [won for episodes in floor.values() for won in episodes]
    return [{"name": "random floor", "sampling": None, "outcomes": floor,
             "metrics": {"success_rate": sum(played) / len(played), "episodes": len(played)}}]


def compare_rows(cfg: DictConfig, evaluator: Evaluator, main: Any, source: CheckpointSource | None,
                 descriptors: list[str]) -> tuple[dict[str, Any], Any]:
    """`compare=`: the second policy's weights pushed into the same engine, the same tasks played from the same seed,
    and the paired difference (main - compared) in success, with its 95 % interval."""
    from agentforge.evaluation.summary import paired_verdict

    if source is not None and source.kind == "checkpoint":
        check_compatible(source, evaluator.spec.path)
    base_model = build_model_spec(cfg).path  # the recipe's model (not a model dir given as checkpoint=)
    name = "base (as shipped)" if source is None else f"compare: {source.describe()}"
    console.print(f"[bold]compare[/]: {name} on the same {len(evaluator.tasks)} tasks and sampling seed")
    evaluator.engine.update_weights(policy_weights(source, base_model))
    compared = evaluator.row(name, evaluator.sampling, descriptors)
    record = paired_verdict(name, main.name, episode_outcomes(compared.groups), episode_outcomes(main.groups))
    return record or {}, compared


def eval_tasks(cfg: DictConfig, settings: EvalSettings) -> tuple[Any, list[Any]]:
    """The eval's tasks: the first `eval.num_tasks` of the reserved held-out split (distinct by content), or, for
    `eval.split=train`, the training tasks a run of this seed draws from `eval.seed_offset` on, held-out content
    skipped as the run skipped it (replaying a training rollout: not held out, said so)."""
    held_out, keyer = build_held_out(cfg, {settings.split: int(settings.num_tasks)} if settings.split != "train"
                                     else {}, {settings.split: int(settings.seed_offset)})
    try:
        if settings.split != "train":
            return held_out, held_out.tasks(settings.split, int(settings.num_tasks))
        from agentforge.commands.builders import build_training_streams
        from agentforge.tasks import task_sampler

        console.print("[yellow]eval.split=train: training tasks, not held-out ones (a replay, not a measurement)")
        streams = build_training_streams(cfg, held_out, keyer)
        sampler = task_sampler(str(cfg.env.name), without_name(cfg.env), "train", int(settings.seed_offset),
                               streams.stream, streams.admit)
        return held_out, sampler.sample(int(settings.num_tasks))
    finally:
        keyer.close()


def held_out_overlap(evaluator: Evaluator, split: str, source: CheckpointSource | None) -> dict[str, Any]:
    """How the eval's tasks were found (distinct by content) and how many of them the checkpoint's run trained on,
    measured from the record its run wrote (agentforge/tasks/held_out.py; None where there is no record)."""
    from agentforge.tasks.held_out import RECORD_FILE, earlier_training, overlap

    held_out = evaluator.held_out
    if split == "train":
        return {"held_out": None, "trained_on": None}
    trained: set[str] | None = None
    if source is not None and source.run_dir is not None and (source.run_dir / RECORD_FILE).is_file():
        trained = earlier_training(str(source.run_dir))
    elif source is not None and source.kind == "model":
        trained = earlier_training(str(source.weights_dir))
    measured = None if trained is None else overlap(trained, held_out.digests(evaluator.tasks))
    if measured is not None:
        console.print(f"held-out {split}: {len(evaluator.tasks)} tasks, {measured} of them trained on by the "
                      "checkpoint's run (measured)", highlight=False)
    elif source is not None:
        console.print(f"[yellow]held-out {split}: the checkpoint's run left no task record ({RECORD_FILE}): the "
                      "overlap with its training tasks is not known", highlight=False)
    return {"held_out": held_out.to_json(), "trained_on": measured}


def build_evaluator(cfg: DictConfig, settings: EvalSettings, source: CheckpointSource | None) -> Evaluator:
    """The evaluator's parts from the composed config (this command's layer): the model (the recipe's, a model dir
    given as `checkpoint=`, or the recipe's with a checkpoint's weights pushed in), the held-out tasks, the engine,
    the env pool and the algorithm's eval workflow (`build_rollout_stack`: a start that fails part-way closes what it
    had started)."""
    spec = build_model_spec(cfg)
    if source is not None and source.kind == "model":
        spec = replace(spec, path=str(source.weights_dir), name=f"{spec.name}@{source.weights_dir}")
    elif source is not None:
        check_compatible(source, spec.path)
    seed = default_seed(int(cfg.seed)) if settings.seed is None else int(settings.seed)
    held_out, tasks = eval_tasks(cfg, settings)
    console.print(f"[bold]eval[/] {source.describe() if source else 'the recipe model as shipped'} · model "
                  f"{spec.name} · engine {cfg.engine.name} · env {cfg.env.name} · {len(tasks)} tasks × "
                  f"{settings.samples_per_task} at T={settings.temperature}")
    def push_checkpoint(engine: Any) -> None:
        if source is not None and source.kind == "checkpoint":
            engine.update_weights(load_checkpoint_weights(source, spec.path))

    stack = build_rollout_stack(cfg, spec, ["eval"], after_engine=push_checkpoint)
    evaluator = Evaluator(settings, spec, seed, tasks, stack, held_out, build_task_depth(cfg))  # it closes them
    return evaluator


def output_dir(cfg: DictConfig, settings: EvalSettings) -> Path:
    folder = Path(str(settings.output)) if settings.output else Path(str(cfg.run_dir))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_eval(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate `checkpoint=` (or the recipe's model) and write eval.json, eval.md and trajectories.jsonl."""
    from agentforge.evaluation.report import eval_markdown, eval_table, write_eval_outputs

    settings = EvalSettings.from_config(cfg.get("eval"))
    descriptors = resolve_descriptors(settings.descriptors, str(cfg.env.name), cfg.algorithm.get("descriptor"))
    if settings.interventions:
        from agentforge.evaluation.interventions import check_intervention_env

        check_intervention_env(str(cfg.env.name), str(settings.intervention_cases))
    source = resolve_checkpoint(cfg.get("checkpoint"))
    comparing, compare_source = resolve_compare(cfg.get("compare"))
    prepare_run_dir(cfg)
    label = policy_label(settings, source, cfg)
    evaluator = build_evaluator(cfg, settings, source)
    try:
        rows = [evaluator.row(label, evaluator.sampling, descriptors)]
        for baseline in settings.baselines:
            name = f"{label}+{BASELINES[baseline][2]}"
            rows.append(evaluator.row(name, baseline_sampling(evaluator.sampling, baseline, settings), descriptors))
        interventions, intervention_groups = None, {}
        if settings.interventions:
            from agentforge.evaluation.interventions import run_interventions

            interventions, intervention_groups = run_interventions(
                evaluator, settings, label, plain(cfg.env_pool), int(cfg.env.get("max_steps", 50)))
        comparison = None
        if comparing:
            comparison, compared = compare_rows(cfg, evaluator, rows[0], compare_source, descriptors)
            rows.append(compared)
    finally:
        evaluator.close()
    report = {
        "checkpoint": source.to_json() if source else None,
        "model": evaluator.spec.path,
        "env": str(cfg.env.name),
        "tasks": {"split": settings.split, "num_tasks": len(evaluator.tasks), "first_seed": evaluator.tasks[0].seed,
                  "last_seed": evaluator.tasks[-1].seed, **held_out_overlap(evaluator, settings.split, source)},
        "samples_per_task": int(settings.samples_per_task),
        "temperature": float(settings.temperature),
        "engine_seed": evaluator.seed,
        "descriptors": descriptors,
        "rows": [{"name": r.name, "sampling": asdict(r.sampling), "metrics": r.metrics,
                  "outcomes": episode_outcomes(r.groups)} for r in rows] + floor_rows(cfg, evaluator, settings),
        "interventions": interventions,
        "comparison": comparison,
        "settings": asdict(settings),
        "config": plain(cfg),
    }
    folder = output_dir(cfg, settings)
    paths = write_eval_outputs(folder, report, rows[0].groups, intervention_groups)
    console.print(eval_table(report))
    if interventions:
        from agentforge.evaluation.report import intervention_table

        console.print(intervention_table(interventions))
    if comparison:
        console.print(comparison["text"], highlight=False)
    console.print("\n".join(f"{k}: {v}" for k, v in paths.items()))
    console.print(f"viewer: {view_hint(folder)}", soft_wrap=True)
    report["markdown"] = eval_markdown(report)
    return report

