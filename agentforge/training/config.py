"""Checks that fail a training config before any expensive start-up, and `resume=` resolution."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from agentforge.algorithms import make_algorithm
from agentforge.errors import ConfigError

GROUP_RELATIVE = {"grpo", "gigpo", "tjpo", "t2po", "strata", "trajevolve"}


def validate_train_config(cfg: DictConfig) -> None:
    """Reject configs that cannot work, with the reason and the fix."""
    t = cfg.trainer
    for key in ("iterations", "tasks_per_iteration", "group_size"):
        if int(t[key]) < 1:
            raise ConfigError(f"trainer.{key}={t[key]} must be >= 1")
    if cfg.algorithm.name in GROUP_RELATIVE and int(t.group_size) < 2:
        raise ConfigError(
            f"{cfg.algorithm.name} compares rollouts within a group: trainer.group_size={t.group_size} gives every "
            "advantage 0 and nothing is learned; use trainer.group_size >= 2"
        )
    episodes = int(t.tasks_per_iteration) * int(t.group_size)
    ranks = int(cfg.learner.num_ranks)
    if ranks < 1 or episodes % ranks:
        raise ConfigError(
            f"the batch of {episodes} episodes (trainer.tasks_per_iteration x trainer.group_size) is not divisible "
            f"by learner.num_ranks={ranks}: every rank must get whole episodes; change one of them"
        )
    budget = int(cfg.agent.max_prompt_tokens) + int(cfg.agent.sampling.max_new_tokens)
    max_len = cfg.engine.get("max_model_len")
    if max_len is not None and budget > int(max_len):
        raise ConfigError(
            f"agent.max_prompt_tokens + agent.sampling.max_new_tokens = {budget} exceeds engine.max_model_len="
            f"{max_len}; lower one or raise engine.max_model_len"
        )
    make_algorithm(cfg.algorithm).check_run(
        {key: OmegaConf.to_container(cfg[key], resolve=True) for key in ("trainer", "agent", "engine", "model", "env")})
    if float(cfg.agent.sampling.temperature) != 1.0:
        import logging

        logging.getLogger("agentforge.training.trainer").warning(
            "agent.sampling.temperature=%s: the engine's log-probs are those of the untempered policy, so PPO ratios "
            "will not be 1 at the first step (train/logprob_mismatch shows it)", cfg.agent.sampling.temperature
        )


def resolve_resume_dir(cfg: DictConfig) -> Path | None:
    """`resume=false` → None; `resume=<run dir>` → it; `resume=true` → the newest run of this command that has a
    checkpoint (sibling folders of this run's folder); `resume=auto` → this run's own folder when it has a complete
    checkpoint, else a fresh start (what a requeued Slurm job with a fixed run dir needs)."""
    resume = cfg.get("resume", False)
    if resume in (False, None, "false", "False"):
        return None
    if resume == "auto":
        here = Path(cfg.run_dir)
        return here if any((here / "checkpoints").glob("iter_*/COMPLETE")) else None
    if resume not in (True, "true", "True"):
        path = Path(str(resume))
        if not (path / "checkpoints").is_dir():
            raise ConfigError(f"resume={resume}: no checkpoints/ folder there; point it at a run directory")
        return path
    here = Path(cfg.run_dir).resolve()
    candidates = [
        p for p in here.parent.glob("*")
        if p.is_dir() and p.resolve() != here and any((p / "checkpoints").glob("iter_*"))
    ]
    if not candidates:
        raise ConfigError(
            f"resume=true found no earlier run with checkpoints under {here.parent}; pass resume=<run dir> instead"
        )
    return max(candidates, key=lambda p: p.stat().st_mtime)
