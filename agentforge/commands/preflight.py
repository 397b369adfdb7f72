"""Fail fast: check the config, the env's options, data paths and data files before anything expensive starts.

Why: the model, the rollout engine (vLLM), the learner and Ray take tens of seconds to start, and env workers only
build their envs after that, so a wrong data path used to be reported only after ~70 s. Every check here runs in
the driver, reads files at most, and raises `ConfigError` with the problem and the fix.

An env class may define `check_options(options, splits)` (a classmethod) to check its data for the splits the
command will play (ALFWorld: the engine is installed, `ALFWORLD_DATA` or the folder holds games in the expected
layout, broken game files are named). Every env's options are also matched against its constructor's parameters.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig


def command_splits(cfg: DictConfig) -> list[str]:
    """The task splits a command plays: train → train and eval; sft, rft → train; rollout/eval → their `split`."""
    command = str(cfg.get("command", "rollout"))
    if command == "train":
        return ["train", "eval"]
    if command in ("sft", "rft"):
        return ["train"]
    section = cfg.get(command)
    split = section.get("split") if section is not None else None
    return [str(split)] if split else []


def check_env(name: str, options: dict[str, Any], splits: list[str]) -> None:
    """The env exists, accepts these options, and (when it says how) has data for `splits`."""
    from agentforge.envs.base import check_env_class
    from agentforge.hosting.pool import resolve_env

    check_env_class(resolve_env(name), f"env {name!r}", options, splits)


def preflight(cfg: DictConfig, config_checked: bool = False) -> None:
    """All the cheap checks for a composed config: every config problem at once (the schema, then the multi-key
    checks; skipped when the caller has just run them: `config_checked`), then the env's data for the splits the
    command plays."""
    from agentforge.commands.builders import plain, without_name
    from agentforge.commands.config_check import check_config

    if not config_checked:
        check_config(cfg)
    check_env(str(cfg.env.name), without_name(cfg.env), command_splits(cfg))
    if str(cfg.get("command", "")) == "train" and cfg.get("trainer") is not None:
        from agentforge.training.curriculum import check_curriculum

        check_curriculum(plain(cfg.trainer.get("curriculum")), str(cfg.env.name), without_name(cfg.env), ["train"])
