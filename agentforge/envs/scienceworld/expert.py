"""The ScienceWorld expert: the package's gold action sequence for the task's (task name, variation).

It is replayed through a real env with the same options before it is returned, so a path is only used when it
really wins within `max_steps` (and, with `admissible: true`, when every action is in the admissible list the
agent would see); it is cut after the winning action. The replay env (one JVM) is kept for the process and
closed at exit: starting a JVM per task would cost ~2 s each.
"""

from __future__ import annotations

import atexit
import json
import threading
from typing import Any

from agentforge.envs.scienceworld.env import ScienceWorldEnv
from agentforge.types import Task

_ENVS: dict[str, ScienceWorldEnv] = {}
_LOCK = threading.Lock()


def _expert_env(env_options: dict[str, Any]) -> ScienceWorldEnv:
    key = json.dumps(env_options, sort_keys=True, default=str)
    if key not in _ENVS:
        _ENVS[key] = ScienceWorldEnv(**env_options)
    return _ENVS[key]


def close_expert_envs() -> None:
    """Stop the experts' JVMs (also runs at interpreter exit)."""
    with _LOCK:
        for env in _ENVS.values():
            env.close()
        _ENVS.clear()


atexit.register(close_expert_envs)


def expert_actions(task: Task, env_options: dict[str, Any] | None = None) -> list[str] | None:
    """The gold actions that win `task` through the env, or None when the gold path does not win in time."""
    with _LOCK:
        env = _expert_env(dict(env_options or {}))
        name, variation = env.task_variation(task)
        gold = env.gold_actions(name, variation)
        return winning_prefix(env, name, variation, gold)


def winning_prefix(env: ScienceWorldEnv, task_name: str, variation: int, actions: list[str]) -> list[str] | None:
    """Replay `actions`; the prefix that ends with the win, or None if they do not win (in time, admissibly)."""
    observation = env.reset_to(task_name, variation)
    for count, action in enumerate(actions, start=1):
        if observation.admissible is not None and action.lower() not in {a.lower() for a in observation.admissible}:
            return None
        result = env.step(action)
        if result.won:
            return actions[:count]
        if result.done:
            return None
        observation = result.observation
    return None
