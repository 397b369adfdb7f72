"""How episodes are played (the `agent` config group) and a turn's prompt ids from an observation and history.

Shared by every rollout workflow and by the expert-data builders, so SFT data has exactly the token format of
rollouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentforge.agent.chat import chat_prompt_ids, continuation_ids
from agentforge.agent.prompts import HistoryEntry, PromptTemplate
from agentforge.errors import ConfigError, PromptTooLongError
from agentforge.types import Observation, SamplingConfig, Task


@dataclass
class AgentConfig:
    """How episodes are played. `execute_relaxed`: act on actions found by the relaxed parser (still penalised)."""

    max_turns: int = 10
    history: str = "window"  # window (the last history_length steps in each prompt) | conversation
    history_length: int = 2
    execute_relaxed: bool = True
    few_shot: bool = False
    max_prompt_tokens: int = 2048
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    schedule: str = "lockstep"  # lockstep | per_episode (agentforge.rollout.per_episode)
    straggler_wait: float = 1.0  # per_episode: a call waits for episodes at their env step, × the last call's time

    def __post_init__(self) -> None:
        if self.history not in HISTORY_MODES:
            raise ConfigError(f"agent.history={self.history!r} is not a history mode; choose one of "
                              f"{', '.join(HISTORY_MODES)}")

    @property
    def conversation(self) -> bool:
        return self.history == "conversation"


HISTORY_MODES = ("window", "conversation")


def render_turn_prompt(
    template: PromptTemplate,
    tokenizer: Any,
    config: AgentConfig,
    observation: Observation,
    history: list[HistoryEntry],
    step: int,
    task: Task,
    notes: Sequence[str] = (),
    instruction: str = "",
) -> list[int]:
    """A turn's prompt ids: the last K history entries, dropping the oldest until the prompt fits the budget.

    `notes` are episode-level texts shown at the top of every turn's user message (e.g. a StraTA strategy);
    `instruction` is added at its end (TrajEvolve's think-only prompt for a fixed action).
    """
    window = history[-config.history_length :] if config.history_length > 0 else []
    while True:
        intro = history[0].observation if history else observation.text
        messages = template.messages(observation, window, step, config.few_shot, intro, notes, instruction)
        ids = chat_prompt_ids(tokenizer, messages)
        if len(ids) <= config.max_prompt_tokens:
            return ids
        if not window:
            raise PromptTooLongError(
                f"the prompt for {task.describe()} has {len(ids)} tokens without history, over "
                f"agent.max_prompt_tokens={config.max_prompt_tokens}; raise it (and the engine's max_model_len) "
                "or shorten the env's observation",
                len(ids),
            )
        window = window[1:]


def conversation_prompt(
    template: PromptTemplate,
    tokenizer: Any,
    previous_prompt: Sequence[int],
    previous_response: Sequence[int],
    observation: Observation,
    history: list[HistoryEntry],
    step: int,
    error: str = "",
) -> list[int]:
    """A later turn's prompt in a conversation (`agent.history=conversation`): the previous turn's prompt ids, the
    ids it sampled, then the env's reply (`template.reply`) in the chat template's pieces. Nothing before the reply
    is encoded again, so each prompt extends the last one token for token (and the learner can share its prefix).
    `error`: why the last response was not executed (said in the reply)."""
    intro = history[0].observation if history else observation.text
    reply = template.reply(observation, history, step, intro, error)
    return [*map(int, previous_prompt), *map(int, previous_response),
            *continuation_ids(tokenizer, list(previous_response), reply)]
