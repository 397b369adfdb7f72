"""The Env protocol and the env registry. Envs are pure Python objects; pools decide where they live."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from agentforge.registry import Registry
from agentforge.types import Observation, StepResult, Task


@runtime_checkable
class Env(Protocol):
    """A text environment. Deterministic given the task (seed) and the actions, so episodes can be replayed."""

    def reset(self, task: Task) -> Observation: ...

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...


ENVS: Registry[type] = Registry("env")


def make_env(name: str, options: dict[str, Any] | None = None) -> Env:
    """Build a registered env by name with its options (the `env` config group minus `name`)."""
    import agentforge.envs  # noqa: F401  (registers the built-in envs)

    return ENVS.get(name)(**(options or {}))
