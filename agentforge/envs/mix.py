"""`env=mix`: one run on several envs at once, each task played by its own env.

A mixed run's tasks name their env (`Task.env`: `sokoban`, `search_qa`, ...); the `mix` env hosts one instance
of each member env (built on first use, with that member's options) and hands every call to the one the current
task names. The env pool, replay and crash recovery see one ordinary env: a task still replays on the env it
names. Which tasks a run plays (by weight) is `agentforge.tasks.MixedTaskSampler`'s job; prompt templates, held-out
eval and metrics stay per member env (docs/configuration.md#mixed-env-runs); groups are per task, so group-relative
advantages never mix envs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from agentforge.envs.base import ENVS, Env, is_replayable
from agentforge.errors import ConfigError
from agentforge.types import Observation, StepResult, Task

MIX = "mix"
WEIGHT = "weight"
DEFAULT_MEMBERS = {"sokoban": {WEIGHT: 1.0}, "search_qa": {WEIGHT: 1.0}}  # two cheap built-ins (`envs: null`)


def mix_members(envs: Any) -> dict[str, tuple[float, dict[str, Any]]]:
    """`{env: (weight, options)}` from the `envs` option (`{sokoban: {weight: 2, dim_room: [6, 6]}, ...}`), checked:
    at least one member, positive finite weights, no nested mix. Errors name the member and the fix. None: the
    default members (Sokoban and search QA, equal weights)."""
    if envs is None:
        envs = DEFAULT_MEMBERS
    if not isinstance(envs, Mapping) or not envs:
        raise ConfigError("env=mix needs env.envs: a mapping of member envs to their weight and options, e.g. "
                          "env.envs={sokoban: {weight: 1}, search_qa: {weight: 1}}")
    out: dict[str, tuple[float, dict[str, Any]]] = {}
    for name, spec in envs.items():
        spec = dict(spec or {})
        spec.pop("name", None)
        weight = spec.pop(WEIGHT, 1.0)
        if str(name) == MIX:
            raise ConfigError("env=mix cannot contain another mix; list its member envs directly")
        try:
            weight = float(weight)
        except (TypeError, ValueError):
            weight = math.nan
        if not math.isfinite(weight) or weight <= 0:
            raise ConfigError(f"env.envs.{name}.weight={spec.get(WEIGHT, weight)!r}: a member's weight must be a "
                              "positive number (its share of the training tasks)")
        out[str(name)] = (weight, spec)
    return out


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
        from agentforge.training.preflight import check_env

        for name, (_, member_options) in mix_members(options.get("envs")).items():
            check_env(name, member_options, list(splits))

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
