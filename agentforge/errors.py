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


class PromptTooLongError(ConfigError):
    """A turn's prompt does not fit `agent.max_prompt_tokens` even with no history. At an episode's first turn the
    config cannot work; at a later one (an observation that grows, e.g. a game log) the rollout ends the episode as
    truncated instead (`tokens`: the prompt's length)."""

    def __init__(self, message: str, tokens: int) -> None:
        super().__init__(message)
        self.tokens = tokens


class EnvWorkerError(AgentforgeError):
    """An environment worker kept dying; names the env and the task seed."""


def unknown_name(kind: str, name: str, valid: list[str]) -> ConfigError:
    """Error for an unknown registry name, listing the valid ones."""
    return ConfigError(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(sorted(valid)) or '(none)'}")


def require(module: str, install: str) -> None:
    """Fail with the exact install command when an optional dependency is missing."""
    if importlib.util.find_spec(module) is None:
        raise AgentforgeError(f"optional dependency {module!r} is not installed; install it with: {install}")
