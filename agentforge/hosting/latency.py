"""Injected env step latency: any env made slow with a heavy-tailed, reproducible sleep per step.

Real agent envs have heavy-tailed step times (a web page that loads in 50 ms or 5 s, a JVM that stalls, a tool call
that retries). Lockstep rollout waits for the slowest env step of every turn; per-episode scheduling does not.
`env_pool.step_latency: {dist: lognormal, median_s: 0.05, sigma: 1.0}` wraps every env of a pool so its steps sleep
that long first, the same seconds for the same (task, step) in every run and on replay, so schedules can be compared
on the same episodes (benchmarks/schedule.py, tests of the scheduler).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentforge.errors import ConfigError
from agentforge.types import Observation, StepResult, Task

DISTRIBUTIONS = ("lognormal", "pareto", "fixed")


@dataclass(frozen=True)
class StepLatency:
    """The sleep before each env step: `median_s` seconds at the median, `lognormal` (shape `sigma`), `pareto`
    (tail index `alpha`: the smaller, the heavier) or `fixed`; never more than `max_s`."""

    dist: str = "lognormal"
    median_s: float = 0.05
    sigma: float = 1.0
    alpha: float = 1.5
    max_s: float = 10.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dist not in DISTRIBUTIONS:
            raise ConfigError(f"env_pool.step_latency.dist={self.dist!r} is not a latency distribution; valid: "
                              f"{', '.join(DISTRIBUTIONS)}")
        if self.median_s < 0 or self.max_s < 0:
            raise ConfigError("env_pool.step_latency: median_s and max_s must be >= 0 seconds")
        if self.sigma <= 0 or self.alpha <= 0:
            raise ConfigError("env_pool.step_latency: sigma and alpha must be > 0")

    @classmethod
    def from_options(cls, options: dict[str, Any] | None) -> StepLatency | None:
        if not options:
            return None
        unknown = sorted(set(options) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"unknown env_pool.step_latency option(s) {unknown}; valid: "
                              f"{', '.join(cls.__dataclass_fields__)}")
        return cls(**options)

    def seconds(self, task: Task, step: int) -> float:
        """The latency of the task's `step`-th step (0-based): a pure function of the task, the step and `seed`."""
        draw = random.Random(f"{self.seed}|{task.env}|{task.split}|{task.seed}|{task.task_id}|{step}")
        if self.dist == "fixed":
            value = self.median_s
        elif self.dist == "lognormal":
            value = self.median_s * math.exp(self.sigma * draw.gauss(0.0, 1.0))
        else:  # pareto with the given median: x_m = median / 2^(1/alpha)
            value = self.median_s / 2 ** (1 / self.alpha) * (1.0 - draw.random()) ** (-1 / self.alpha)
        return min(value, self.max_s)


class LatencyEnv:
    """An env whose every step first sleeps `latency.seconds(task, step)`; everything else is the inner env's."""

    def __init__(self, inner: Any, latency: StepLatency) -> None:
        self.inner, self.latency = inner, latency
        self._task: Task | None = None
        self._steps = 0

    def reset(self, task: Task) -> Observation:
        self._task, self._steps = task, 0
        return self.inner.reset(task)

    def step(self, action: str) -> StepResult:
        if self._task is not None:
            time.sleep(self.latency.seconds(self._task, self._steps))
        self._steps += 1
        return self.inner.step(action)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # the inner env's own attributes (replayable, replay_note, ...)
        return getattr(self.inner, name)


class LatencyEnvFactory:
    """A picklable env factory (it travels to Ray env workers) that wraps each env in `LatencyEnv`."""

    def __init__(self, inner: Callable[..., Any], latency: StepLatency) -> None:
        self.inner, self.latency = inner, latency
        self.replayable = bool(getattr(inner, "replayable", True))
        self.__name__ = f"{getattr(inner, '__name__', 'env')}+latency"

    def __call__(self, **options: Any) -> LatencyEnv:
        return LatencyEnv(self.inner(**options), self.latency)
