"""Which schema checks which part of a composed config: fixed sections, and the groups whose schema depends on the
option chosen (the engine, the env, the algorithm: built-in or a plugin named by dotted path)."""

from __future__ import annotations

import dataclasses
import inspect
import keyword
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

from agentforge.schema.groups import (
    AgentSchema,
    EnvPoolSchema,
    EvalSchema,
    HeldOutSchema,
    HFEngineSchema,
    LoggerSchema,
    ModelSchema,
    RewardSchema,
    RFTSchema,
    RolloutSchema,
    SFTSchema,
    TrainerSchema,
    VLLMEngineSchema,
)
from agentforge.schema.options import GeneratedSchema, opt

SECTIONS: dict[str, type] = {
    "model": ModelSchema, "agent": AgentSchema, "trainer": TrainerSchema, "sft": SFTSchema, "rft": RFTSchema,
    "rollout": RolloutSchema, "eval": EvalSchema, "held_out": HeldOutSchema, "env_pool": EnvPoolSchema,
    "logger": LoggerSchema, "reward": RewardSchema,
}
ENGINE_SCHEMAS: dict[str, type] = {"vllm": VLLMEngineSchema, "hf": HFEngineSchema}
GROUPS = ("model", "engine", "env", "agent", "algorithm", "learner", "logger", "trainer", "eval", "held_out", "sft",
          "rft", "rollout", "launch", "env_pool", "reward")
TOP_LEVEL_EXTRA = ("hardware", "hydra")  # the dtype resolution's record; Hydra's own node when present


# sections whose schema is their owner's own settings class, registered by the owner where it defines it (the
# learner's LearnerConfig, the launcher's SlurmOptions), so this room imports nothing above it
OWNED_SECTIONS: dict[str, type] = {}


def owns_section(name: str) -> Any:
    """Class decorator: the class is the schema of config section `name`."""
    def register(cls: type) -> type:
        OWNED_SECTIONS[name] = cls
        return cls

    return register


def owned_schema(name: str) -> type:
    if name not in OWNED_SECTIONS:
        raise LookupError(f"no part has registered the schema of section {name!r}; import its owner first (the "
                          "commands floor imports every owner)")
    return OWNED_SECTIONS[name]


def learner_schema() -> type:
    return owned_schema("learner")


def launch_schema() -> type:
    return owned_schema("launch")


def engine_schema(name: str) -> type:
    """vLLM's and transformers' schemas; a plugin engine (`pkg.mod:Class`) is checked against its constructor."""
    if name in ENGINE_SCHEMAS:
        return ENGINE_SCHEMAS[name]
    from agentforge.engines import ENGINES

    entry = ENGINES.get(name)
    cls = entry() if name in ENGINES else entry
    return signature_schema(f"engine {name}", cls, skip=("self", "spec"))


@cache
def _env_schema(name: str) -> type:
    from agentforge.hosting.pool import resolve_env

    return signature_schema(f"env {name}", resolve_env(name), skip=("self",))


def env_schema(name: str) -> type:
    """An env's options are its constructor's parameters (types from its annotations, help from `option_help`)."""
    return _env_schema(str(name))


def algorithm_schema(name: str) -> type:
    """An algorithm's options are its config dataclass's fields (a keyword field `lambda_` is the key `lambda`)."""
    import agentforge.algorithms  # noqa: F401  (registers the built-ins)
    from agentforge.algorithms.base import ALGORITHMS

    return with_name(ALGORITHMS.get(str(name)).config_class, str(name))


@cache
def with_name(config_class: type, name: str) -> type:
    """The config dataclass plus the group's `name` key, keyword fields spelled as the YAML spells them."""
    hints = typing.get_type_hints(config_class)
    helps = getattr(config_class, "option_help", {}) or {}
    fields = [("name", str, opt(name, "the algorithm (registered name or pkg.module:Class)"))]
    for f in dataclasses.fields(config_class):
        key = f.name[:-1] if f.name.endswith("_") and keyword.iskeyword(f.name[:-1]) else f.name
        metadata = {**f.metadata, "help": f.metadata.get("help") or helps.get(f.name, "")}
        if f.default_factory is not dataclasses.MISSING:
            spec = dataclasses.field(default_factory=f.default_factory, metadata=metadata)
        else:
            spec = dataclasses.field(default=f.default, metadata=metadata)
        fields.append((key, hints.get(f.name, Any), spec))
    return GeneratedSchema(config_class.__name__, fields)  # type: ignore[return-value]


def signature_schema(what: str, cls: type, skip: tuple[str, ...] = ()) -> Any:
    """A schema from a constructor: every keyword parameter with its annotation and default, plus `name`."""
    hints = typing.get_type_hints(cls.__init__) if hasattr(cls, "__init__") else {}
    help_lines: Mapping[str, str] = getattr(cls, "option_help", {}) or {}
    fields: list[tuple[str, Any, Any]] = [("name", str, opt(what.split()[1], f"the {what.split()[0]} (registered "
                                                                            "name or pkg.module:Class)"))]
    for pname, param in inspect.signature(cls).parameters.items():
        if pname in skip or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = param.default if param.default is not param.empty else dataclasses.MISSING
        if isinstance(default, tuple):
            default = list(default)
        fields.append((pname, hints.get(pname, Any), opt(default, help_lines.get(pname, ""))))
    return GeneratedSchema(cls.__name__, fields)


def group_options(group: str, builtin_only: bool = False) -> list[str]:
    """The options of a group whose keys depend on the option chosen (engine, env, algorithm); `builtin_only`
    leaves out plugins registered in this process (the generated docs list agentforge's own)."""
    if group == "engine":
        return list(ENGINE_SCHEMAS)
    if group == "env":
        from agentforge.envs import ENVS

        return ENVS.builtin_names() if builtin_only else ENVS.names()
    if group == "algorithm":
        import agentforge.algorithms  # noqa: F401
        from agentforge.algorithms.base import ALGORITHMS

        return ALGORITHMS.builtin_names() if builtin_only else ALGORITHMS.names()
    return []
