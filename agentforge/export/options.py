"""`key=value` arguments of the plain commands `export` and `serve`: one positional path, then options, each checked
against the command's known keys so a typo is refused by name instead of silently ignored."""

from __future__ import annotations

from collections.abc import Mapping

from agentforge.errors import ConfigError

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
DTYPE_NAMES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
               "fp32": "float32", "float32": "float32"}


def parse_args(args: list[str], known: Mapping[str, str], command: str) -> tuple[str, dict[str, str]]:
    """(the path, {key: value}); `known` maps each option to its one-line help (used in the error)."""
    paths = [a for a in args if "=" not in a]
    options: dict[str, str] = {}
    for arg in args:
        if "=" in arg:
            key, _, value = arg.partition("=")
            if key not in known:
                valid = ", ".join(f"{k}=" for k in known)
                raise ConfigError(f"agentforge {command}: unknown option {key!r}; valid options: {valid} "
                                  f"(agentforge {command} --help)")
            options[key] = value
    if len(paths) != 1:
        got = "none" if not paths else ", ".join(repr(p) for p in paths)
        raise ConfigError(f"agentforge {command} takes one path (got {got}); agentforge {command} --help")
    return paths[0], options


def flag(options: Mapping[str, str], key: str, default: bool = False) -> bool:
    value = options.get(key)
    if value is None or value == "":
        return default
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise ConfigError(f"{key}={value}: expected true or false")


def dtype_name(value: str | None, default: str) -> str:
    """bf16 | fp16 | fp32 (or the long names) → the torch dtype's name; None → `default`."""
    if value is None or value == "":
        return default
    if value.lower() not in DTYPE_NAMES:
        raise ConfigError(f"dtype={value}: valid dtypes: bf16, fp16, fp32 (default: the checkpoint's own)")
    return DTYPE_NAMES[value.lower()]
