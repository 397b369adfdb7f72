"""One option of the config schema: a dataclass field with its help line and value constraints in its metadata.

The schema of a config group is a dataclass whose fields are options: the field's type annotation is the option's
type, its default the default, and `opt(...)` adds one line of help and the constraints the checker
(`schema.check`) enforces. The same metadata answers `agentforge config` and the README's configuration tables.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any

MISSING = dataclasses.MISSING


def opt(default: Any = MISSING, help: str = "", *, ge: float | None = None, gt: float | None = None,  # noqa: A002
        le: float | None = None, lt: float | None = None, choices: tuple | list | None = None) -> Any:
    """A schema field: default (lists and dicts are copied per instance), help, and bounds or choices."""
    metadata = {"help": help, "ge": ge, "gt": gt, "le": le, "lt": lt,
                "choices": tuple(choices) if choices is not None else None}
    if isinstance(default, list | dict | set) or (dataclasses.is_dataclass(default) and not isinstance(default, type)):
        value = default
        return field(default_factory=lambda: copy.deepcopy(value), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Option:
    """What the checker and the listings need to know about one option."""

    name: str
    annotation: Any
    default: Any
    help: str = ""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple | None = None

    @property
    def nested(self) -> type | None:
        """The dataclass of a nested section (learner.lora, agent.sampling ...), else None."""
        return self.annotation if dataclasses.is_dataclass(self.annotation) else None

    @property
    def type_name(self) -> str:
        return type_name(self.annotation)


class GeneratedSchema:
    """A schema made from code rather than written as a dataclass: an algorithm's config class with its `name` (and a
    keyword field such as `lambda_` spelled `lambda`, which no dataclass field can be called), an env's or a plugin
    engine's constructor. `fields` are (key, annotation, dataclasses.Field) triples."""

    def __init__(self, name: str, fields: list[tuple[str, Any, Any]]) -> None:
        self.__name__ = f"{name}Options"
        self.fields = fields


def _default(f: Any) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def options(schema: Any) -> dict[str, Option]:
    """The options of a schema (a dataclass or a GeneratedSchema), in field order (type hints resolved)."""
    if isinstance(schema, GeneratedSchema):
        return {key: _option(key, annotation, f) for key, annotation, f in schema.fields}
    hints = typing.get_type_hints(schema)
    helps = getattr(schema, "option_help", {}) or {}
    return {f.name: _option(f.name, hints.get(f.name, Any), f, helps.get(f.name, ""))
            for f in dataclasses.fields(schema)}


def _option(name: str, annotation: Any, f: Any, help_line: str = "") -> Option:
    """An option from a dataclass field; help from `opt(...)` metadata, else a class's `option_help` entry."""
    meta = dict(f.metadata)
    return Option(name, annotation, _default(f), meta.get("help") or help_line, meta.get("ge"), meta.get("gt"),
                  meta.get("le"), meta.get("lt"), meta.get("choices"))


def type_name(annotation: Any) -> str:
    """A short readable type: int, float | None, list[str], one of (a, b) ..."""
    if annotation is Any:
        return "any"
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else type_name(a) for a in typing.get_args(annotation))
    if origin in (list, tuple, dict):
        args = ", ".join(type_name(a) for a in typing.get_args(annotation) if a is not Ellipsis)
        return f"{origin.__name__}[{args}]" if args else origin.__name__
    if dataclasses.is_dataclass(annotation):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def default_text(value: Any) -> str:
    if value is MISSING:
        return "(required)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if dataclasses.is_dataclass(value):
        return "(section)"
    if isinstance(value, tuple):
        value = list(value)
    return str(value).replace("'", "")


def typed(schema: type, values: dict[str, Any]) -> Any:
    """A checked section's values as its schema's dataclass (nested sections as theirs): what a part is handed, so
    its signature says what it reads. Keys the schema lacks are refused by name (the checker reports them first)."""
    known = options(schema)
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise TypeError(f"{schema.__name__} has no option(s) {unknown}")
    return schema(**{name: typed(known[name].nested, value) if known[name].nested is not None and
                     isinstance(value, dict) else value for name, value in values.items()})
