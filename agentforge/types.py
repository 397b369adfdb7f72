"""The few data types every part shares: tasks, observations, completions, turns, trajectories, groups."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Task:
    """One environment instance to solve; the G rollouts of a group share it (and so its seed)."""

    env: str
    seed: int
    split: str = "train"
    task_id: str = ""

    def describe(self) -> str:
        return f"{self.env}[{self.split}] seed={self.seed}" + (f" id={self.task_id}" if self.task_id else "")


@dataclass
class Observation:
    """What an env shows the agent. `anchor` is the raw state (no history) GiGPO groups on; it must be hashable."""

    text: str
    anchor: Hashable
    admissible: list[str] | None = None


@dataclass
class StepResult:
    observation: Observation
    reward: float
    done: bool
    won: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class SamplingConfig:
    """Engine-independent sampling options. top_k <= 0 disables top-k."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0


@dataclass
class Completion:
    """One sampled response: the exact token ids the engine sampled and their log-probs.

    `forced_mask[i]` is True where a decoding intervention emitted token i without sampling; such tokens must be
    masked out of the policy loss (their log-probs are the model's raw values, not a sampling probability).
    """

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    forced_mask: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.forced_mask:
            self.forced_mask = [False] * len(self.token_ids)


@dataclass
class Turn:
    """One agent turn: prompt and response tokens exactly as the engine saw and produced them."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    forced_mask: list[bool]
    response_text: str
    action: str | None
    valid: bool
    reward: float
    env_reward: float
    anchor: Hashable
    observation: str
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self, with_tokens: bool) -> dict[str, Any]:
        out = asdict(self)
        out["anchor"] = self.anchor.hex() if isinstance(self.anchor, bytes) else self.anchor
        if not with_tokens:
            for key in ("prompt_ids", "response_ids", "logprobs", "forced_mask"):
                out.pop(key)
        return out


@dataclass
class Trajectory:
    """One episode of one rollout of a task."""

    task: Task
    rollout_index: int
    turns: list[Turn] = field(default_factory=list)
    won: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def episode_return(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def length(self) -> int:
        return len(self.turns)

    @property
    def response_tokens(self) -> int:
        return sum(len(t.response_ids) for t in self.turns)

    @property
    def prompt_tokens(self) -> int:
        return sum(len(t.prompt_ids) for t in self.turns)

    @property
    def invalid_turns(self) -> int:
        return sum(not t.valid for t in self.turns)

    def to_json(self, with_tokens: bool = False) -> dict[str, Any]:
        return {
            "task": asdict(self.task),
            "rollout_index": self.rollout_index,
            "won": self.won,
            "return": self.episode_return,
            "length": self.length,
            "response_tokens": self.response_tokens,
            "prompt_tokens": self.prompt_tokens,
            "invalid_turns": self.invalid_turns,
            "meta": self.meta,
            "turns": [t.to_json(with_tokens) for t in self.turns],
        }


@dataclass
class Group:
    """The G trajectories of one task: the unit every group-relative advantage is computed over."""

    task: Task
    trajectories: list[Trajectory]
