"""The schemas' defaults in Hydra's ConfigStore, so every option of the chosen engine, env and algorithm appears in
the composed config (`--cfg job` shows them all, with their defaults) while the YAML files hold only values.

Each `conf/<group>/<option>.yaml` starts with `defaults: [/schema/<group>/<option>@_here_, _self_]`: the schema's
defaults first, the file's values on top. The nodes are plain values (the checker, not OmegaConf, enforces types:
so every problem can be reported at once, and keys such as `lambda` that no dataclass field can be called work).
"""

from __future__ import annotations

import math
from typing import Any

from agentforge.schema.options import MISSING, options

_registered = False


def _value(value: Any) -> Any:
    if value is MISSING:
        return "???"
    if isinstance(value, tuple):
        return [_value(v) for v in value]
    if isinstance(value, list):
        return [_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def defaults_node(schema: Any) -> dict[str, Any]:
    """A schema's defaults as a plain mapping (nested sections as mappings)."""
    out: dict[str, Any] = {}
    for name, option in options(schema).items():
        out[name] = defaults_node(option.nested) if option.nested is not None else _value(option.default)
    return out


def schema_nodes() -> dict[tuple[str, str], dict[str, Any]]:
    """(group, option) -> defaults, for every built-in engine, env and algorithm."""
    from agentforge.schema.registry import ENGINE_SCHEMAS, algorithm_schema, env_schema, group_options

    nodes = {("engine", name): defaults_node(schema) for name, schema in ENGINE_SCHEMAS.items()}
    nodes.update({("env", name): defaults_node(env_schema(name)) for name in group_options("env")})
    nodes.update({("algorithm", name): defaults_node(algorithm_schema(name)) for name in group_options("algorithm")})
    return nodes


def register_schemas() -> None:
    """Store every schema node once per process (under `schema/<group>/<option>`)."""
    global _registered
    if _registered:
        return
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for (group, name), node in schema_nodes().items():
        store.store(group=f"schema/{group}", name=name, node=node, provider="agentforge")
    _registered = True
