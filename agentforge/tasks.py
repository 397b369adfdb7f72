"""Task sampling: which env seeds a rollout plays. Train and eval seeds come from disjoint ranges."""

from __future__ import annotations

from dataclasses import dataclass

from agentforge.errors import ConfigError
from agentforge.types import Task

SPLIT_SEED_BASE = {"train": 0, "eval": 1_000_000, "test": 2_000_000}


@dataclass
class TaskSampler:
    """Hands out tasks with consecutive seeds of a split; its position is part of a checkpoint."""

    env: str
    split: str = "train"
    seed_offset: int = 0
    position: int = 0

    def __post_init__(self) -> None:
        if self.split not in SPLIT_SEED_BASE:
            raise ConfigError(f"unknown split {self.split!r}; valid splits: {', '.join(SPLIT_SEED_BASE)}")

    def sample(self, count: int) -> list[Task]:
        base = SPLIT_SEED_BASE[self.split] + self.seed_offset + self.position
        self.position += count
        return [Task(env=self.env, seed=base + i, split=self.split) for i in range(count)]

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])
