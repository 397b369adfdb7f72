"""Build the parts (model spec, engine, env pool, rollout context) from a composed Hydra config."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentforge.agent.prompts import prompt_for
from agentforge.agent.render import AgentConfig
from agentforge.engines import make_engine
from agentforge.engines.base import RolloutEngine
from agentforge.engines.interventions import InterventionSpec
from agentforge.envs.pool import EnvPool, make_pool
from agentforge.errors import ConfigError
from agentforge.models.loading import ModelSpec, resolve_model
from agentforge.rollout.workflow import RolloutContext
from agentforge.types import SamplingConfig


def plain(node: Any) -> Any:
    """A config node as plain Python containers (resolved)."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def without_name(node: Any) -> dict[str, Any]:
    options = dict(plain(node))
    options.pop("name", None)
    return options


def prepare_run_dir(cfg: DictConfig, run_dir: Path | None = None) -> Path:
    """Create the run folder and write the resolved config into it (what every command's run starts with)."""
    run_dir = run_dir or Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    return run_dir


def build_model_spec(cfg: DictConfig) -> ModelSpec:
    """The model to load; `model.init_from=<HF folder>` (e.g. an SFT run's `model/`) replaces its weights."""
    model_cfg = dict(plain(cfg.model))
    init_from = model_cfg.pop("init_from", None)
    spec = resolve_model(model_cfg)
    if init_from:
        path = Path(str(init_from))
        if not (path / "config.json").exists():
            raise ConfigError(f"model.init_from={init_from} is not an HF model folder (no config.json); point it at an "
                              "SFT run's model/ folder")
        spec = replace(spec, path=str(path), name=f"{spec.name}@{path}")
    return spec


def build_engine(cfg: DictConfig, spec: ModelSpec) -> RolloutEngine:
    return make_engine(cfg.engine.name, spec, without_name(cfg.engine))


def build_pool(cfg: DictConfig) -> EnvPool:
    pool_cfg = plain(cfg.env_pool)
    kind = pool_cfg.pop("kind")
    return make_pool(kind, cfg.env.name, without_name(cfg.env), **pool_cfg)


def build_agent_config(cfg: DictConfig) -> AgentConfig:
    agent = plain(cfg.agent)
    sampling = SamplingConfig(**agent.pop("sampling"))
    agent.pop("intervention", None)
    return AgentConfig(sampling=sampling, **agent)


def build_intervention(cfg: DictConfig) -> InterventionSpec | None:
    spec = plain(cfg.agent.get("intervention"))
    return InterventionSpec(kind=spec["kind"], params=spec.get("params", {})) if spec else None


def build_rollout_context(cfg: DictConfig, engine: RolloutEngine, pool: EnvPool) -> RolloutContext:
    """What a rollout workflow plays with: the engine, the env pool, the env's prompt template, the agent config."""
    return RolloutContext(engine, pool, prompt_for(cfg.env.name), build_agent_config(cfg), build_intervention(cfg))
