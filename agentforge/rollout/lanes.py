"""Engine lanes: where per-episode scheduling sends generate calls.

A lane serves one generate call at a time. Engine replicas are one lane each (the call runs in the replica's actor
while the driver goes on); an in-process engine is one lane whose calls run to the end when submitted (the env
steps already sent to a Ray pool run meanwhile). An episode keeps its lane for the whole rollout, so each of its
turns reuses the prefix its replica has cached.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentforge.engines.interventions import InterventionSpec
from agentforge.types import Completion, SamplingConfig


@dataclass
class GenerationJob:
    """One generate call of a lane: the episodes (slots) it serves, in prompt order."""

    lane: int
    slots: list[int]
    prompts: list[list[int]]
    sampling: SamplingConfig
    interventions: list[InterventionSpec | None] | None
    started: float = field(default_factory=time.perf_counter)
    ref: Any = None  # a Ray object ref while a replica generates
    completions: list[Completion] | None = None  # already there (in-process)


class EngineLanes(Protocol):
    count: int

    def lane_of(self, key: Hashable) -> int: ...

    def submit(self, job: GenerationJob) -> GenerationJob: ...

    def result(self, job: GenerationJob) -> list[Completion]: ...


class InlineLanes:
    """An in-process engine: one lane, each call generated when it is submitted."""

    count = 1

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def lane_of(self, key: Hashable) -> int:
        return 0

    def submit(self, job: GenerationJob) -> GenerationJob:
        job.completions = self.engine.generate(job.prompts, job.sampling, job.interventions)
        return job

    def result(self, job: GenerationJob) -> list[Completion]:
        assert job.completions is not None
        return job.completions


class ReplicaLanes:
    """Engine replicas (`ReplicatedEngine`): a lane per replica, calls running in the replicas' actors."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.count = int(engine.lanes)

    def lane_of(self, key: Hashable) -> int:
        return int(self.engine.lane_of(key))

    def submit(self, job: GenerationJob) -> GenerationJob:
        job.ref = self.engine.submit_lane(job.lane, job.prompts, job.sampling, job.interventions)
        return job

    def result(self, job: GenerationJob) -> list[Completion]:
        return self.engine.finish_lane(job.lane, job.ref, job.prompts, job.sampling, job.interventions)


def lanes_for(engine: Any) -> EngineLanes:
    return ReplicaLanes(engine) if hasattr(engine, "submit_lane") else InlineLanes(engine)
