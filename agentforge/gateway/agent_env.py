"""What an external agent is given (`AgentTask`) and how its entry point is loaded (`env=agent`; the options are
`agentforge.envs.agent.AgentEnv`'s)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentforge.envs.base import make_env
from agentforge.errors import ConfigError
from agentforge.types import Task


@dataclass
class AgentTask:
    """What an agent is given besides its base_url and api_key: the task (the task env's seed and split), the task
    env's name and options (`make_env()` builds one, e.g. to serve its tools), and `report_reward` for intermediate
    rewards (added to the episode's latest model call)."""

    task: Task
    session_id: str
    rollout_index: int
    env_name: str
    env_options: dict[str, Any] = field(default_factory=dict)
    report_reward: Callable[[float], None] = field(default=lambda reward: None, repr=False)

    def make_env(self) -> Any:
        return make_env(self.env_name, self.env_options)


def load_callable(path: str | None, what: str) -> Callable[..., Any]:
    """`package.module:attribute` → the callable, with an error naming what is wrong."""
    if not path or ":" not in path:
        raise ConfigError(f"{what} must be `package.module:callable` (e.g. env.entry="
                          f"agentforge.gateway.examples.openai_search:run), got {path!r}")
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what}={path!r}: cannot import {module_name!r} ({exc}); install the package or put it "
                          "on PYTHONPATH") from exc
    target = getattr(module, attribute, None)
    if not callable(target):
        raise ConfigError(f"{what}={path!r}: {module_name} has no callable {attribute!r}")
    return target
