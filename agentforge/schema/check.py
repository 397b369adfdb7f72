"""Check a config section against its schema: unknown keys (with the nearest valid one), types, bounds, choices.

Every problem becomes one short line naming the key, what is wrong and the fix; all of a config's problems are
collected (never only the first), so one run of the command shows everything to fix. Values are checked as Hydra
parses them from YAML and the command line (`learner.lr=abc` arrives as the string 'abc').
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from agentforge.schema.options import MISSING, Option, options, type_name


def _plain(value: Any) -> Any:
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, DictConfig | ListConfig):
            return OmegaConf.to_container(value, resolve=False)
    except ImportError:  # pragma: no cover - hydra is a dependency
        pass
    return value


def suggestion(key: str, valid: Sequence[str]) -> str:
    """The nearest valid key: a spelling neighbour, else the one key that `key` abbreviates (`async` ->
    `asynchronous`, too short for difflib's ratio)."""
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    if not close and len(key) >= 3:
        close = [k for k in valid if k.startswith(key)]
        close = close if len(close) == 1 else []
    return f"did you mean {close[0]!r}? " if close else ""


def valid_keys(where: str, valid: Sequence[str]) -> str:
    """The valid keys when they fit on a line, else where to find them."""
    group = where.split(".", 1)[0]
    if len(valid) <= 12:
        return f"valid keys of {where}: {', '.join(sorted(valid))}"
    command = "agentforge config" if group == "config" else f"agentforge config {group}"
    return f"`{command}` lists the {len(valid)} keys of {where}"


# keys that moved, with where they went: a config or command line that still says the old one is told the new one
MOVED_KEYS = {
    "agent.invalid_penalty": "reward.invalid_penalty (the reward stages: agentforge/rewards/)",
    "learner.loss.kl_in": "reward.kl.coef (KL in the reward; learner.loss.kl_coef is KL in the loss)",
    "learner.loss.kl_target": "reward.kl.target (the adaptive KL-in-reward controller)",
    "learner.loss.kl_horizon": "reward.kl.horizon (the adaptive KL-in-reward controller)",
}


def moved_key_problem(path: str) -> str | None:
    """The problem line for a key that moved (`MOVED_KEYS`), or None."""
    if path not in MOVED_KEYS:
        return None
    return f"{path}: this key moved; use {MOVED_KEYS[path]}"


def unknown_key_problem(where: str, key: str, valid: Sequence[str]) -> str:
    moved = moved_key_problem(f"{where}.{key}")
    return moved or f"{where}.{key}: unknown key; {suggestion(key, valid)}{valid_keys(where, valid)}"


def check_section(where: str, values: Any, schema: type, problems: list[str],
                  ignore: Sequence[str] = ()) -> None:
    """Append a line to `problems` for each unknown key, wrongly typed or out-of-range value of `values` (a mapping,
    checked against the dataclass `schema`); nested sections are checked too. Keys in `ignore` are skipped."""
    values = _plain(values)
    if not isinstance(values, Mapping):
        problems.append(f"{where}: expected a section of keys (e.g. {where}.key=value), got {values!r}")
        return
    known = options(schema)
    for key in values:
        if key in ignore:
            continue
        if key not in known:
            problems.append(unknown_key_problem(where, str(key), list(known)))
    for name, option in known.items():
        if name in ignore or name not in values:
            if option.default is MISSING and name not in values and name not in ignore:
                problems.append(f"{where}.{name}: required; set {where}.{name}=<{option.type_name}>")
            continue
        check_value(f"{where}.{name}", values[name], option, problems)


def check_value(path: str, value: Any, option: Option, problems: list[str]) -> None:
    value = _plain(value)
    if option.nested is not None:
        if value is None:
            return
        check_section(path, value, option.nested, problems)
        return
    if value == "???":
        problems.append(f"{path}: required; set {path}=<{option.type_name}>")
        return
    about = f" — {option.help}" if option.help else ""
    if not fits(value, option.annotation):
        example = "" if option.default in (MISSING, None) else f" (default {option.default!r})"
        problems.append(f"{path}={value!r}: must be {described(option.annotation)}{example}{about}")
        return
    problem = bounds_problem(value, option)
    if problem:
        problems.append(f"{path}={value!r}: {problem}{about}")


def described(annotation: Any) -> str:
    words = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string", "null": "null",
             "list": "a list", "any": "anything"}
    name = type_name(annotation)
    return " or ".join(words.get(part.strip(), part.strip()) for part in name.split(" | "))


def fits(value: Any, annotation: Any) -> bool:
    """Whether a parsed YAML/command-line value has the annotated type (ints are numbers; scalars are strings)."""
    if annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if annotation is str:
        return isinstance(value, str | int | float) and not isinstance(value, bool)
    if annotation in (list, tuple):  # a bare `list`: any elements, but a list
        return isinstance(value, list | tuple)
    if origin in (list, tuple, collections.abc.Sequence):
        if not isinstance(value, list | tuple):
            return False
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        if origin is tuple and args and len(args) != len(value) and Ellipsis not in typing.get_args(annotation):
            return False
        element = args[0] if args else Any
        return all(fits(v, element if origin is not tuple or len(args) == 1 else args[i]) for i, v in enumerate(value))
    if origin is dict or annotation is dict:
        return isinstance(value, Mapping)
    if dataclasses.is_dataclass(annotation):
        return isinstance(value, Mapping)
    return True


def bounds_problem(value: Any, option: Option) -> str | None:
    if option.choices is not None and value is not None:
        if value not in option.choices:
            return f"is not one of {', '.join('null' if c is None else str(c) for c in option.choices)}"
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    rules = [(option.ge, value >= (option.ge or 0), ">="), (option.gt, value > (option.gt or 0), ">"),
             (option.le, value <= (option.le or 0), "<="), (option.lt, value < (option.lt or 0), "<")]
    failed = [f"{sign} {bound:g}" for bound, ok, sign in rules if bound is not None and not ok]
    return f"must be {' and '.join(failed)}" if failed else None


def dataclass_problems(where: str, instance: Any) -> list[str]:
    """The same checks on a dataclass instance built in code (LearnerConfig(...), an algorithm's config)."""
    problems: list[str] = []
    check_section(where, dataclasses.asdict(instance), type(instance), problems)
    return problems
