"""`env=mix`: one run on several envs at once, each task played by its own env.

A mixed run's tasks name their env (`Task.env`: `sokoban`, `search_qa`, ...); the `mix` env hosts one instance
of each member env (built on first use, with that member's options) and hands every call to the one the current
task names. The env pool, replay and crash recovery see one ordinary env: a task still replays on the env it
names. Which tasks a run plays (by weight) is `agentforge.tasks.MixedTaskSampler`'s job; prompt templates, held-out
eval and metrics stay per member env (docs/conversation.md#mixed-env-runs-envmix); groups are per task, so
group-relative advantages never mix envs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from agentforge.envs.base import ENVS, Env, check_env_class, is_replayable
from agentforge.errors import ConfigError
from agentforge.tasks import MIX, mix_members
from agentforge.types import Observation, StepResult, Task


@ENVS.register(MIX)
class MixEnv:
    """Plays each task on the member env its `Task.env` names (see the module docstring)."""

    option_help: ClassVar[dict[str, str]] = {
        "envs": "member envs: {<env>: {weight: <share of training tasks>, <that env's options>...}, ...}; null: "
                "sokoban and search_qa, equal weights",
    }

    def __init__(self, envs: dict | None = None) -> None:
        self.members = mix_members(envs)
        self._envs: dict[str, Env] = {}
        self._current: Env | None = None
        self.replayable = all(is_replayable(ENVS.get(name)) for name in self.members)

    @classmethod
    def check_options(cls, options: dict[str, Any], splits: Sequence[str]) -> None:
        """Every member exists, takes its options and has data for the splits (its own checks)."""
        for name, (_, member_options) in mix_members(options.get("envs")).items():
            check_env_class(ENVS.get(name), f"env.envs.{name}: env {name!r}", member_options, splits)

    def member(self, name: str) -> Env:
        if name not in self.members:
            raise ConfigError(f"task for env {name!r} given to env=mix, whose members are "
                              f"{', '.join(self.members)}; add it to env.envs")
        if name not in self._envs:
            self._envs[name] = ENVS.get(name)(**self.members[name][1])
        return self._envs[name]

    def reset(self, task: Task) -> Observation:
        self._current = self.member(task.env)
        return self._current.reset(task)

    def step(self, action: str) -> StepResult:
        if self._current is None:
            raise RuntimeError("env=mix: call reset(task) before step")
        return self._current.step(action)

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()
        self._current = None
