"""Task sampling: which env seeds a rollout plays.

Seeds of the three splits come from disjoint ranges, but a seed range says nothing about content (two seeds can make
the same room): held-out sets are de-duplicated by content and training streams skip held-out content
(`agentforge.tasks.held_out`, through a sampler's `admit`). A run's seed moves its training streams
(`TRAIN_STREAM_STRIDE`), so training runs of different seeds train on different tasks, not only with different
sampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentforge.errors import ConfigError
from agentforge.types import Task

SPLIT_SEED_BASE = {"train": 0, "eval": 1_000_000, "test": 2_000_000}
TRAIN_STREAM_STRIDE = 10_007  # run seed s starts each training stream s x this many seeds further on
Admit = Callable[[Task], bool]  # False: skip this task (held-out content); the stream moves on past it
Options = tuple[tuple[str, Any], ...]
MIX = "mix"  # the env that plays several member envs in one run (agentforge/envs/mix.py)
WEIGHT = "weight"
DEFAULT_MEMBERS = {"sokoban": {WEIGHT: 1.0}, "search_qa": {WEIGHT: 1.0}}  # two cheap built-ins (`envs: null`)


def iteration_seed(run_seed: int, iteration: int, salt: int = 0) -> int:
    """A distinct, reproducible sampling seed per (run, iteration, purpose): the trainer's rollouts and evals, and
    `agentforge eval` when it replays the trainer's eval sampling."""
    return (run_seed * 1_000_003 + iteration * 7_919 + salt) % 2**31


def stream_start(split: str, seed_offset: int, stream: int) -> int:
    """The first seed of a stream: the split's base, the configured offset, and (training) the run seed's shift."""
    return SPLIT_SEED_BASE[split] + seed_offset + stream * TRAIN_STREAM_STRIDE


@dataclass
class TaskSampler:
    """Hands out tasks with consecutive seeds of a split, skipping those `admit` refuses; its position (seeds drawn,
    skipped ones included) is part of a checkpoint."""

    env: str
    split: str = "train"
    seed_offset: int = 0
    position: int = 0
    stream: int = 0  # the run seed (training streams): which stretch of the split's seeds this run trains on
    admit: Admit | None = None

    def __post_init__(self) -> None:
        if self.split not in SPLIT_SEED_BASE:
            raise ConfigError(f"unknown split {self.split!r}; valid splits: {', '.join(SPLIT_SEED_BASE)}")

    def sample(self, count: int, options: Options = ()) -> list[Task]:
        """`count` tasks (each carrying `options`, a curriculum's level) of the admitted ones, in seed order."""
        out: list[Task] = []
        while len(out) < count:
            seed = stream_start(self.split, self.seed_offset, self.stream) + self.position
            self.position += 1
            task = Task(env=self.env, seed=seed, split=self.split, options=options)
            if self.admit is None or self.admit(task):
                out.append(task)
        return out

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])


@dataclass
class MixedTaskSampler:
    """Tasks of several envs by weight (`env=mix`): each env's tasks take consecutive seeds of the split, as a
    `TaskSampler` of that env would hand them out, and the envs take turns by smooth weighted round robin, so every
    prefix of the sequence is as close to the weights as whole tasks allow (weights 2:1 give a a b a a b ...,
    never a run of one env that a random draw could give a small batch). Deterministic; its counters are part of a
    checkpoint."""

    weights: dict[str, float]
    split: str = "train"
    seed_offset: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    credit: dict[str, float] = field(default_factory=dict)
    stream: int = 0
    admit: Admit | None = None

    def __post_init__(self) -> None:
        if self.split not in SPLIT_SEED_BASE:
            raise ConfigError(f"unknown split {self.split!r}; valid splits: {', '.join(SPLIT_SEED_BASE)}")
        if not self.weights or any(not w > 0 for w in self.weights.values()):
            raise ConfigError(f"mixed task sampling needs positive weights, got {self.weights}")
        for env in self.weights:
            self.counts.setdefault(env, 0)
            self.credit.setdefault(env, 0.0)

    @property
    def position(self) -> int:
        return sum(self.counts.values())

    def next_env(self) -> str:
        total = sum(self.weights.values())
        for env, weight in self.weights.items():
            self.credit[env] += weight
        env = max(self.weights, key=lambda e: self.credit[e])  # ties: the first listed
        self.credit[env] -= total
        return env

    def sample(self, count: int, options: Options = ()) -> list[Task]:
        out: list[Task] = []
        for _ in range(count):
            env = self.next_env()
            while True:  # this env's turn: its next admitted task
                seed = stream_start(self.split, self.seed_offset, self.stream) + self.counts[env]
                self.counts[env] += 1
                task = Task(env=env, seed=seed, split=self.split, options=options)
                if self.admit is None or self.admit(task):
                    out.append(task)
                    break
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "counts": dict(self.counts), "credit": dict(self.credit)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "counts" not in state:
            raise ConfigError("this checkpoint's task sampler is not a mixed one (env=mix); resume it with the env "
                              "it was trained on")
        self.counts = {env: int(state["counts"].get(env, 0)) for env in self.weights}
        self.credit = {env: float(state["credit"].get(env, 0.0)) for env in self.weights}


def mix_weights(env_name: str, env_options: dict[str, Any] | None) -> dict[str, float] | None:
    """The member weights of `env=mix` (None for any other env)."""
    if env_name != MIX:
        return None
    return {name: weight for name, (weight, _) in mix_members((env_options or {}).get("envs")).items()}


def task_sampler(env_name: str, env_options: dict[str, Any] | None, split: str = "train",
                 seed_offset: int = 0, stream: int = 0, admit: Admit | None = None) -> TaskSampler | MixedTaskSampler:
    """The sampler of a run's training tasks: by weight over the members of `env=mix`, else one env's seeds;
    `stream` (the run seed) moves it along the split, `admit` keeps held-out content out."""
    weights = mix_weights(env_name, env_options)
    if weights is None:
        return TaskSampler(env_name, split, seed_offset, stream=stream, admit=admit)
    return MixedTaskSampler(weights, split, seed_offset, stream=stream, admit=admit)


def task_envs(env_name: str, env_options: dict[str, Any] | None) -> list[str]:
    """The envs whose tasks a run plays: the members of `env=mix` (each gets its own held-out sets and evals,
    reported as `eval/<env>/...`), else the env itself."""
    weights = mix_weights(env_name, env_options)
    return list(weights) if weights is not None else [env_name]


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
