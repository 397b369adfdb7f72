"""`agentforge rollout`: play a policy on N tasks x G and write trajectories plus a summary."""

from __future__ import annotations

import json

from omegaconf import DictConfig
from rich.table import Table

from agentforge.commands.builders import build_model_spec, build_rollout_stack, prepare_run_dir, without_name
from agentforge.evaluation.summary import view_hint
from agentforge.rollout.metrics import rollout_summary
from agentforge.tasks import task_sampler
from agentforge.tracking.progress import console, rollout_progress
from agentforge.tracking.trajectories import write_trajectories


def summary_table(title: str, summary: dict[str, float]) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    return table


def run_rollout(cfg: DictConfig) -> dict[str, float]:
    """Build engine, env pool and the algorithm's rollout workflow from the config, roll out, and write the results
    to the run dir."""
    run_dir = prepare_run_dir(cfg)
    spec = build_model_spec(cfg)
    console.print(f"model [bold]{spec.name}[/] ({spec.path}) · engine [bold]{cfg.engine.name}[/] · env "
                  f"[bold]{cfg.env.name}[/] · pool [bold]{cfg.env_pool.kind}[/]")
    with build_rollout_stack(cfg, spec, ["rollout"]) as stack:
        sampler = task_sampler(str(cfg.env.name), without_name(cfg.env), cfg.rollout.split,
                               int(cfg.rollout.seed_offset))
        tasks = sampler.sample(cfg.rollout.num_tasks)
        total = len(tasks) * cfg.rollout.group_size
        with rollout_progress(f"rollout {cfg.env.name}", total, int(cfg.agent.max_turns)) as on_progress:
            result = stack.workflow("rollout").run(stack.ctx, tasks, cfg.rollout.group_size, on_progress)
    groups = result.groups
    write_trajectories(run_dir / "trajectories.jsonl", groups, cfg.rollout.save_tokens)
    summary = rollout_summary(groups, result.stats, result.metrics)
    if cfg.env.name == "alfworld":  # the papers' per-task-type columns
        from agentforge.envs.alfworld import success_by_task_type

        trajectories = [t for g in groups for t in g.trajectories]
        by_type = success_by_task_type(trajectories, without_name(cfg.env))
        summary.update({f"success/{k}": v for k, v in by_type.items()})
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(summary_table(f"rollout summary ({total} episodes)", summary))
    console.print(f"trajectories: {run_dir / 'trajectories.jsonl'}\nsummary: {run_dir / 'summary.json'}\n"
                  f"viewer: {view_hint(run_dir)}", soft_wrap=True)
    return summary
