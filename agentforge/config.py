"""Compose agentforge's Hydra config outside the CLI (tests, benchmarks, notebooks)."""

from __future__ import annotations

import tempfile

from hydra import compose, initialize_config_module
from omegaconf import DictConfig, open_dict


def compose_config(overrides: list[str] | None = None, run_dir: str | None = None) -> DictConfig:
    """The same config `agentforge <command> <overrides>` would run with; `run_dir` replaces Hydra's output dir."""
    with initialize_config_module(config_module="agentforge.conf", version_base=None):
        cfg = compose(config_name="config", overrides=list(overrides or []))
    with open_dict(cfg):
        cfg.run_dir = run_dir or tempfile.mkdtemp(prefix="agentforge-")
    return cfg
