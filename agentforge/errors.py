"""Errors that tell the user what went wrong *and* how to fix it."""

from __future__ import annotations

import importlib.util


class AgentforgeError(RuntimeError):
    """Base error: every message names the problem and the fix."""


class ConfigError(AgentforgeError):
    """A configuration that cannot work; raised before any expensive work starts."""


class ConfigProblems(ConfigError):
    """All of a config's problems, one line each (the CLI prints them and exits with status 2)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        count = f"{len(problems)} config problem{'s' if len(problems) != 1 else ''}"
        super().__init__(f"{count} (nothing was started):\n  " + "\n  ".join(problems))


class EnvWorkerError(AgentforgeError):
    """An environment worker kept dying; names the env and the task seed."""


def unknown_name(kind: str, name: str, valid: list[str]) -> ConfigError:
    """Error for an unknown registry name, listing the valid ones."""
    return ConfigError(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(sorted(valid)) or '(none)'}")


def require(module: str, install: str) -> None:
    """Fail with the exact install command when an optional dependency is missing."""
    if importlib.util.find_spec(module) is None:
        raise AgentforgeError(f"optional dependency {module!r} is not installed; install it with: {install}")
