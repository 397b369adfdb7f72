"""A difficulty curriculum on the training tasks (`trainer.curriculum`); the held-out tasks never change.

Why: a policy that solves none of its training tasks gets no group-relative signal (every group scores the same),
and one that solves all of them gets none either. Starting on easy instances and moving to the target difficulty
keeps groups mixed for longer (verl-agent and RAGEN users set the difficulty by hand; reasoning-gym ships
curricula for the same reason).

How: the curriculum varies one env option (`option`, e.g. reasoning-gym's `difficulty`, Sokoban's `num_gen_steps`)
over `levels`, easy to hard. Every training task carries its level's value in `Task.options`, and the env host
builds that task's env with it (`envs/host.EnvHost`), so restarts, replays and branching rebuild the same episode.
Eval tasks carry no options: they are played with the env's own options, the same held-out set at every eval.

Two schedules:
- `linear`: level k of n for the k-th n-th of the run's training tasks (counted in tasks handed out, so a resumed
  or dynamically sampled run stays on schedule, and seeds skipped as held-out content do not advance it);
- `success`: the next level once the training success rate averaged over the last `window` iterations at this
  level reaches `promote_at` (it never steps back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentforge.errors import ConfigError
from agentforge.types import Task

SCHEDULES = ("linear", "success")


class TaskSource(Protocol):
    position: int

    def sample(self, count: int, options: tuple[tuple[str, Any], ...] = ()) -> list[Task]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class CurriculumSettings:
    option: str | None = None
    levels: tuple[Any, ...] = ()
    schedule: str = "linear"
    promote_at: float = 0.7
    window: int = 2

    @property
    def enabled(self) -> bool:
        return self.option is not None

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None) -> CurriculumSettings:
        values = dict(section or {})
        option = values.get("option")
        settings = cls(None if option is None else str(option), tuple(_frozen(v) for v in values.get("levels") or ()),
                       str(values.get("schedule", "linear")), float(values.get("promote_at", 0.7)),
                       int(values.get("window", 2)))
        settings.check()
        return settings

    def check(self) -> None:
        if not self.enabled:
            return
        if len(self.levels) < 2:
            raise ConfigError(f"trainer.curriculum.levels={list(self.levels)}: a curriculum needs at least two values "
                              f"of env.{self.option}, easy to hard, e.g. trainer.curriculum.levels=[0,1,2]")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"trainer.curriculum.schedule={self.schedule!r}; valid: {', '.join(SCHEDULES)}")
        if not 0 < self.promote_at <= 1:
            raise ConfigError(f"trainer.curriculum.promote_at={self.promote_at}: a success rate in (0, 1]")
        if self.window < 1:
            raise ConfigError(f"trainer.curriculum.window={self.window}: at least one iteration")

    def level_options(self) -> list[dict[str, Any]]:
        """Each level's env option, for checking the env accepts every value before anything starts."""
        return [{self.option: value} for value in self.levels] if self.enabled else []


def _frozen(value: Any) -> Any:
    """A level's value as a hashable one (a task is hashable): lists become tuples."""
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


@dataclass
class CurriculumSampler:
    """Wraps a run's task sampler: the same seeds, each task stamped with its level's option value."""

    inner: TaskSource
    settings: CurriculumSettings
    total_tasks: int  # the run's training tasks (iterations x tasks per iteration): the linear schedule's length
    level: int = 0
    recent: list[float] = field(default_factory=list)  # training success at this level, last `window` iterations
    handed: int = 0  # tasks handed out (the linear schedule's clock: seeds skipped as held out do not count)

    def __post_init__(self) -> None:
        if not self.settings.enabled:
            raise ConfigError("CurriculumSampler needs trainer.curriculum.option set")
        if self.total_tasks < 1:
            raise ConfigError(f"a curriculum over {self.total_tasks} training tasks")

    @property
    def position(self) -> int:
        return self.inner.position

    @property
    def value(self) -> Any:
        return self.settings.levels[self.level]

    def _linear_level(self) -> int:
        levels = len(self.settings.levels)
        return min(levels - 1, self.handed * levels // self.total_tasks)

    def sample(self, count: int, options: tuple[tuple[str, Any], ...] = ()) -> list[Task]:
        if self.settings.schedule == "linear":
            self.level = self._linear_level()
        self.handed += count
        # the level's option goes on the task before the held-out filter sees it: a room is keyed as it is played
        return self.inner.sample(count, ((str(self.settings.option), self.value),))

    def observe(self, success_rate: float) -> bool:
        """One iteration's training success at the current level; True when it moved the `success` schedule up."""
        if self.settings.schedule != "success" or self.level >= len(self.settings.levels) - 1:
            return False
        self.recent = (self.recent + [float(success_rate)])[-self.settings.window:]
        if len(self.recent) == self.settings.window and \
                sum(self.recent) / len(self.recent) >= self.settings.promote_at:
            self.level += 1
            self.recent = []
            return True
        return False

    def metrics(self) -> dict[str, float]:
        value = self.value
        out = {"train/curriculum_level": float(self.level)}
        if isinstance(value, int | float) and not isinstance(value, bool):
            out["train/curriculum_value"] = float(value)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "curriculum": {"level": self.level, "recent": list(self.recent),
                                                          "handed": self.handed}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict({k: v for k, v in state.items() if k != "curriculum"})
        saved = state.get("curriculum")
        self.handed = int((saved or {}).get("handed", self.inner.position))  # older checkpoints: seeds drawn
        if saved is None:  # a checkpoint of a run without a curriculum: the schedule starts where its tasks are
            self.level = self._linear_level() if self.settings.schedule == "linear" else 0
            self.recent = []
            return
        self.level = min(int(saved["level"]), len(self.settings.levels) - 1)
        self.recent = [float(x) for x in saved.get("recent", [])]


def with_curriculum(sampler: TaskSource, section: Mapping[str, Any] | None, env_name: str,
                    total_tasks: int) -> TaskSource | CurriculumSampler:
    """The run's training task source: `sampler` itself, or wrapped in the curriculum the config asks for."""
    settings = CurriculumSettings.from_config(section)
    if not settings.enabled:
        return sampler
    if env_name == "mix":
        raise ConfigError("trainer.curriculum varies one env's option; with env=mix set it on no run (each member "
                          "keeps its own options), or train the member env alone")
    return CurriculumSampler(sampler, settings, total_tasks)


def check_curriculum(section: Mapping[str, Any] | None, env_name: str, env_options: Mapping[str, Any],
                     splits: Sequence[str]) -> None:
    """Before anything starts: the settings are sound and the env accepts every level's value of the option."""
    from agentforge.envs.base import check_env_class
    from agentforge.hosting.pool import resolve_env

    settings = CurriculumSettings.from_config(section)
    if not settings.enabled:
        return
    if env_name == "mix":
        raise ConfigError("trainer.curriculum varies one env's option and cannot be set with env=mix")
    for options in settings.level_options():
        try:
            check_env_class(resolve_env(env_name), f"env {env_name!r}", {**dict(env_options), **options},
                            list(splits))
        except ConfigError as error:
            raise ConfigError(f"trainer.curriculum: env.{settings.option}={options[settings.option]!r} "
                              f"(a level of the curriculum) is refused: {error}") from None
