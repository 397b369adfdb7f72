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


@dataclass(frozen=True)
class SummarySettings:
    """`agent.history=summary` at run time (the `agent.summary` section, `schema.groups.SummarySchema`, documents
    and checks these): when the policy summarises, with what budget and instruction, and whether it is trained."""

    trigger: float = 0.75
    max_tokens: int = 128
    train: bool = True
    instruction: str = ("Your context is nearly full. Before you act, write a short summary of the task and of what "
                        "you have done and learned so far, for yourself to continue from. Write only the summary.")


@dataclass
class AgentConfig:
    """How episodes are played. `execute_relaxed`: act on actions found by the relaxed parser (still penalised)."""

    max_turns: int = 10
    history: str = "window"  # window (the last history_length steps in each prompt) | conversation | summary
    history_length: int = 2
    execute_relaxed: bool = True
    few_shot: bool = False
    max_prompt_tokens: int = 2048
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    schedule: str = "lockstep"  # lockstep | per_episode (agentforge.rollout.per_episode)
    straggler_wait: float = 1.0  # per_episode: a call waits for episodes at their env step, × the last call's time
    summary: SummarySettings = field(default_factory=SummarySettings)  # history=summary: when and how

    def __post_init__(self) -> None:
        if self.history not in HISTORY_MODES:
            raise ConfigError(f"agent.history={self.history!r} is not a history mode; choose one of "
                              f"{', '.join(HISTORY_MODES)}")
        if isinstance(self.summary, dict):
            self.summary = SummarySettings(**self.summary)
        if self.summarises and self.schedule == "per_episode":
            raise ConfigError("agent.history=summary generates its summaries between lockstep turns; "
                              "agent.schedule=per_episode is not built for it: set agent.schedule=lockstep")

    @property
    def conversation(self) -> bool:
        """Each prompt extends the last (conversation, and summary between its summaries)."""
        return self.history in ("conversation", "summary")

    @property
    def summarises(self) -> bool:
        return self.history == "summary"


HISTORY_MODES = ("window", "conversation", "summary")


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
    instruction: str = "",
) -> list[int]:
    """A later turn's prompt in a conversation (`agent.history=conversation`): the previous turn's prompt ids, the
    ids it sampled, then the env's reply (`template.reply`) in the chat template's pieces. Nothing before the reply
    is encoded again, so each prompt extends the last one token for token (and the learner can share its prefix).
    `error`: why the last response was not executed (said in the reply); `instruction`: added after the reply (the
    request for a summary, `agent.history=summary`)."""
    intro = history[0].observation if history else observation.text
    reply = template.reply(observation, history, step, intro, error)
    if instruction:
        reply = f"{reply}\n\n{instruction}"
    return [*map(int, previous_prompt), *map(int, previous_response),
            *continuation_ids(tokenizer, list(previous_response), reply)]


SUMMARY_NOTE = "Your summary of your earlier turns:\n{summary}"


def after_summary_prompt(
    template: PromptTemplate,
    tokenizer: Any,
    observation: Observation,
    history: list[HistoryEntry],
    step: int,
    summary_ids: Sequence[int],
    notes: Sequence[str] = (),
) -> list[int]:
    """The prompt after the policy summarised (`agent.history=summary`): the system prompt and the turn as its first
    prompt shows it, with no history but the summary on top. The summary is the policy's own sampled ids, put in
    as they are (its closing stop token left out), never decoded and encoded again: the learner trains on the ids
    the engine saw."""
    from agentforge.agent.chat import SENTINEL
    from agentforge.models.control_text import control_text

    text = control_text(tokenizer)
    intro = history[0].observation if history else observation.text
    messages = template.messages(observation, [], step, False, intro, [SUMMARY_NOTE.format(summary=SENTINEL),
                                                                       *notes])
    escaped = [{**m, "content": text.escape(str(m.get("content") or ""))} for m in messages]
    rendered = tokenizer.apply_chat_template(escaped, tokenize=False, add_generation_prompt=True)
    before, after = rendered.split(SENTINEL)
    ids = [int(t) for t in summary_ids]
    if ids and ids[-1] in set(tokenizer.all_special_ids):
        ids = ids[:-1]
    return [*text.encode_marked(before), *ids, *text.encode_marked(after)]
