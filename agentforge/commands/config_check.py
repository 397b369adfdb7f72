"""Every problem of a composed config at once: keys, types and bounds of each group against its schema, then the
checks that involve several keys (one home each: the learner's, the algorithm's, the training loop's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

import agentforge.launch.options  # noqa: F401  (registers the `launch` section's schema)
from agentforge.errors import ConfigError, ConfigProblems
from agentforge.learner.config import LearnerConfig
from agentforge.schema.check import check_section, check_value, suggestion
from agentforge.schema.groups import TopLevelSchema
from agentforge.schema.options import options
from agentforge.schema.registry import (
    GROUPS,
    SECTIONS,
    TOP_LEVEL_EXTRA,
    algorithm_schema,
    engine_schema,
    env_schema,
    learner_schema,
)

EXIT_CONFIG_ERROR = 2


def plain_config(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain containers, interpolations resolved where they can be (Hydra's run_dir only inside a
    Hydra app)."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except Exception:  # an unresolvable ${hydra:...} outside a Hydra run
        return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def schema_problems(values: dict[str, Any]) -> list[str]:
    """Keys, types, bounds and choices of every group (no cross-field checks)."""
    problems: list[str] = []
    top = options(TopLevelSchema)
    valid_top = [*top, *GROUPS, *TOP_LEVEL_EXTRA]
    for key in values:
        if key not in valid_top:
            problems.append(f"{key}: unknown top-level key; {suggestion(key, valid_top)}valid: "
                            f"{', '.join(sorted(set(valid_top) - set(TOP_LEVEL_EXTRA)))}")
    for name, option in top.items():
        if name in values and name != "run_dir":
            check_value(name, values[name], option, problems)
    for group, schema in SECTIONS.items():
        if group in values:
            check_section(group, values[group], schema, problems)
    if "learner" in values:
        check_section("learner", values["learner"], learner_schema(), problems)
    for group, resolve in (("engine", engine_schema), ("env", env_schema), ("algorithm", algorithm_schema)):
        node = values.get(group)
        if not isinstance(node, dict):
            continue
        name = node.get("name")
        try:
            schema = resolve(str(name))
        except ConfigError as error:
            problems.append(f"{group}.name={name!r}: {error}")
            continue
        except (ImportError, AttributeError, ValueError) as error:
            problems.append(f"{group}.name={name!r}: cannot load it ({error}); name a registered {group} or "
                            "pkg.module:Class")
            continue
        check_section(group, node, schema, problems)
    return problems


CrossCheck = Callable[[DictConfig], None]


def cross_checks(cfg: DictConfig) -> list[CrossCheck]:
    """The multi-key checks of this command, each raising ConfigError for what it finds."""
    from agentforge.commands.train_checks import TRAIN_CHECKS
    from agentforge.engines.replicas.options import check_replica_config

    if str(cfg.get("command")) == "train":  # the learner as the run builds it (check_run_learner), checked once
        return [check_algorithm, check_replica_config, *TRAIN_CHECKS]
    return [check_learner, check_algorithm, check_replica_config]


def check_learner(cfg: DictConfig) -> None:
    problems = LearnerConfig.from_mapping(OmegaConf.to_container(cfg.learner, resolve=True))._cross_field_problems()
    if problems:
        raise ConfigProblems(problems)


def check_algorithm(cfg: DictConfig) -> None:
    from agentforge.algorithms import make_algorithm

    make_algorithm(cfg.algorithm)  # each algorithm's own multi-option checks (its validate())


def config_problems(cfg: DictConfig) -> list[str]:
    """Every problem, schema first; the multi-key checks run only on a config whose values have the right types."""
    problems = schema_problems(plain_config(cfg))
    if problems:
        return problems
    for check in cross_checks(cfg):
        try:
            check(cfg)
        except ConfigProblems as error:
            problems += error.problems
        except ConfigError as error:
            problems.append(str(error))
    return list(dict.fromkeys(problems))  # a problem two checks see (the learner's, the run's learner) once


def check_config(cfg: DictConfig) -> None:
    """Raise ConfigProblems with every problem of the config (or return)."""
    problems = config_problems(cfg)
    if problems:
        raise ConfigProblems(problems)
