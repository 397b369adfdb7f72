"""The few data types every part shares: tasks, observations, completions, turns, trajectories, groups, and a
rollout's throughput counters (what the progress display reads)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


@dataclass(frozen=True)
class Task:
    """One environment instance to solve; the G rollouts of a group share it (and so its seed).

    `options`: env options this task is played with over the env's own, as (name, value) pairs (a curriculum's
    level: `training/curriculum.py`); the env host builds the task's env with them. Held-out tasks carry none."""

    env: str
    seed: int
    split: str = "train"
    task_id: str = ""
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> str:
        """The task's identity across evals: what a paired comparison of two evals matches on."""
        return f"{self.env}:{self.split}:{self.seed}" + (f":{self.task_id}" if self.task_id else "") + \
            "".join(f":{name}={value}" for name, value in self.options)

    def describe(self) -> str:
        return f"{self.env}[{self.split}] seed={self.seed}" + (f" id={self.task_id}" if self.task_id else "") + \
            "".join(f" {name}={value}" for name, value in self.options)


@dataclass
class Observation:
    """What an env shows the agent. `anchor` is the raw state (no history) GiGPO groups on; it must be hashable.

    `info`: what the env says about this state besides its text, copied into the info of the turn taken in it (a
    game the policy plays on every side says there whose move it is: `rollout.sides`)."""

    text: str
    anchor: Hashable
    admissible: list[str] | None = None
    info: dict[str, Any] = field(default_factory=dict)


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
    uncertainty: bool = False  # also return each generated token's next-token entropy and top probability


@dataclass
class Completion:
    """One sampled response: the exact token ids the engine sampled and their log-probs.

    `forced_mask[i]` is True where a decoding intervention emitted token i without sampling; such tokens must be
    masked out of the policy loss (their log-probs are the model's raw values, not a sampling probability).
    With `SamplingConfig.uncertainty`, `entropy[i]` (nats) and `top_prob[i]` describe the next-token distribution
    token i was drawn from, computed from the raw logits (before penalties, temperature and any forcing);
    otherwise both are None.
    """

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    forced_mask: list[bool] = field(default_factory=list)
    entropy: list[float] | None = None
    top_prob: list[float] | None = None
    policy_version: int | None = None  # the weight version that sampled it (engine replicas count their pushes)
    replica: int | None = None  # the engine replica that sampled it
    # (token index, version): weights pushed mid-response (engine.interrupt_tokens); tokens from the index on were
    # sampled by that version, the ones before by `policy_version` or the previous switch
    version_switches: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.forced_mask:
            self.forced_mask = [False] * len(self.token_ids)


class LossRole(str, Enum):
    """How the learner treats a generated span. Masking is decided by this data, never by an algorithm's name.

    ACTION: an env turn's response, trained with its turn's advantage (forced tokens inside it excluded).
    STRATEGY: text written before the first turn and shown in every action prompt (StraTA), trained with its own
    advantage. REASONING: reasoning regenerated for a fixed action (TrajEvolve), trained with its turn's advantage;
    the fixed action's tokens are forced. NOT_TRAINED: generated but never trained (a judgment, a discarded turn).
    FORCED: tokens put in place without sampling (a fixed action, a scripted turn): no loss.
    SUMMARY: the policy's summary of its earlier turns (`agent.history=summary`), trained with the advantage of the
    env turn that follows it (its `turn_index`), whatever the algorithm.
    """

    ACTION = "action"
    STRATEGY = "strategy"
    REASONING = "reasoning"
    NOT_TRAINED = "not_trained"
    FORCED = "forced"
    SUMMARY = "summary"

    @property
    def trained(self) -> bool:
        return self in (LossRole.ACTION, LossRole.STRATEGY, LossRole.REASONING, LossRole.SUMMARY)

    @property
    def takes_turn_advantage(self) -> bool:
        """A span trained with its env turn's advantage, not one the algorithm's `span_advantages` gives."""
        return self is LossRole.SUMMARY


@dataclass
class Span:
    """A generation outside the env turns: a strategy, a judgment, a discarded attempt at a turn.

    `kind` names what produced it (e.g. "strategy", "judgment", "discarded_turn"); `turn_index` is the env turn it
    belongs to, when it belongs to one. A span with a trained role keeps the exact engine token ids and log-probs,
    like a turn; its advantage comes from the algorithm's `span_advantages`.
    """

    role: LossRole
    kind: str
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str
    forced_mask: list[bool] = field(default_factory=list)
    turn_index: int | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.role = LossRole(self.role)
        if not self.forced_mask:
            self.forced_mask = [False] * len(self.response_ids)

    @classmethod
    def from_completion(cls, completion: Completion, prompt_ids: list[int], role: LossRole, kind: str,
                        turn_index: int | None = None, **info: Any) -> Span:
        return cls(role=role, kind=kind, prompt_ids=list(prompt_ids), response_ids=list(completion.token_ids),
                   logprobs=list(completion.logprobs), text=completion.text, forced_mask=list(completion.forced_mask),
                   turn_index=turn_index, info=dict(info))

    def to_json(self, with_tokens: bool) -> dict[str, Any]:
        out = asdict(self)
        out["role"] = self.role.value
        if not with_tokens:
            for key in ("prompt_ids", "response_ids", "logprobs", "forced_mask"):
                out.pop(key)
        return out


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
    role: LossRole = LossRole.ACTION

    def to_json(self, with_tokens: bool) -> dict[str, Any]:
        out = asdict(self)
        out["anchor"] = self.anchor.hex() if isinstance(self.anchor, bytes) else self.anchor
        out["role"] = LossRole(self.role).value
        if not with_tokens:
            for key in ("prompt_ids", "response_ids", "logprobs", "forced_mask"):
                out.pop(key)
        return out


@dataclass
class Trajectory:
    """One episode of one rollout of a task: its env turns, plus any generations outside them (`spans`)."""

    task: Task
    rollout_index: int
    turns: list[Turn] = field(default_factory=list)
    won: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    spans: list[Span] = field(default_factory=list)

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
            **({"spans": [s.to_json(with_tokens) for s in self.spans]} if self.spans else {}),
        }


@dataclass
class Group:
    """The G trajectories of one task: the unit every group-relative advantage is computed over."""

    task: Task
    trajectories: list[Trajectory]


@dataclass
class RolloutStats:
    """Throughput counters of one workflow run (for the summary and the progress bar).

    `generated_tokens`/`generate_seconds` count every generation (extra and discarded ones too); `extra_generations`
    counts generations outside the env turns (strategies, judgments) and `regenerated_turns` the turns discarded
    and generated again from the same state. Under per-episode scheduling generate calls overlap (one per replica)
    and with env steps: `generate_seconds` then sums the calls' durations, `env_seconds` is the driver's time in
    env pool calls, and `idle_seconds` the time it waited for either.
    """

    generated_tokens: int = 0
    generate_seconds: float = 0.0
    env_steps: int = 0
    env_seconds: float = 0.0
    turns: int = 0
    wall_seconds: float = 0.0
    extra_generations: int = 0
    regenerated_turns: int = 0
    idle_seconds: float = 0.0  # per-episode scheduling: the driver waited with no turn or env result ready
    overlapped: bool = False  # per-episode scheduling: generate calls and env steps ran at the same time
    generate_calls: int = 0  # engine calls made through `RolloutContext.generate` (batches)
    context_limit_ends: int = 0  # conversations ended because the next prompt would not fit (agent.history)


ProgressCallback = Callable[[int, int, RolloutStats], None]
