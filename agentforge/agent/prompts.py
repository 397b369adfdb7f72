"""Per-env prompt templates: how a turn's chat is rendered from the task, a history window and the observation.

Prompt formatting lives here, never in env workers: envs return raw observations, the template decides what the
model sees. A template renders chat *messages*; the rollout workflow applies the tokenizer's chat template once per
turn (`agent.render.render_turn_prompt`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agentforge.registry import Registry
from agentforge.types import Observation


@dataclass(frozen=True)
class HistoryEntry:
    """One past step as the model is reminded of it."""

    observation: str
    action: str


@dataclass(frozen=True)
class StrategyPrompt:
    """What an env family asks for in a StraTA strategy: `guidance` (what to plan) and a short `example`; given by
    the env's template (`PromptTemplate.strategy`)."""

    guidance: str
    example: str


@dataclass(frozen=True)
class PromptTemplate:
    """A chat prompt for one env family.

    `turn` is formatted with: observation, history (rendered entries, or `no_history`), step (1-based),
    steps_taken, admissible (comma-separated), history_length. `few_shot` is an optional example exchange added
    before the first user turn when the agent config asks for it.

    Conversation history (`agent.history=conversation`): the first turn is `messages` without history, each later
    turn's user message is `reply`: the same `turn` text with `conversation_history` in place of the history (the
    past turns are the conversation itself), after `invalid_reply` when the last response gave no action the env
    took.
    """

    system: str
    turn: str
    history_item: str = "[Observation {index}]\n{observation}\n[Your action {index}] {action}"
    no_history: str = "(none yet)"
    action_tag: str = "action"
    require_think: bool = True
    keep_whitespace: bool = False  # the action keeps its newlines and indentation (code); else collapsed
    few_shot: list[dict[str, str]] = field(default_factory=list)
    note_item: str = "{note}\n\n"
    conversation_history: str = "(the conversation above)"
    invalid_reply: str = "Your last reply gave no action that could be taken ({error}).\n\n"
    # TrajEvolve's think-only prompt: the turn's usual prompt plus this, the action already chosen
    think_only: str = (
        "The action for this step is already chosen: {action}. Write only the reasoning that leads to it, inside "
        "<think> </think>, and stop after </think>."
    )
    # StraTA's strategy request for this env family (None: a generic one)
    strategy: StrategyPrompt | None = None

    def messages(
        self,
        observation: Observation,
        history: list[HistoryEntry],
        step: int,
        use_few_shot: bool = False,
        intro: str | None = None,
        notes: Sequence[str] = (),
        instruction: str = "",
    ) -> list[dict[str, str]]:
        """`intro` is the episode's first observation (templates whose task is stated only there use it); `notes`
        are episode-level texts put at the top of the user message (a strategy the agent committed to);
        `instruction` is put at its end (TrajEvolve's think-only request)."""
        turn = self.prepare(observation, history, intro)
        first_index = step - len(turn.history)
        rendered = "\n".join(
            self.history_item.format(index=first_index + i, observation=h.observation, action=h.action)
            for i, h in enumerate(turn.history)
        )
        user = self.turn.format(
            observation=turn.observation.text,
            history=rendered or self.no_history,
            history_length=len(turn.history),
            step=step,
            steps_taken=step - 1,
            admissible=", ".join(turn.observation.admissible or []),
            **turn.fields,
        )
        shots = list(self.few_shot) if use_few_shot else []
        top = "".join(self.note_item.format(note=note) for note in notes)
        return [{"role": "system", "content": self.system}, *shots,
                {"role": "user", "content": top + turn.prefix + user + (f"\n\n{instruction}" if instruction else "")}]

    def reply(self, observation: Observation, history: list[HistoryEntry], step: int, intro: str | None = None,
              error: str = "") -> str:
        """The user message of a later turn in a conversation: the env's reply to the last response, in the turn
        format (`history`: the past steps, for templates whose `prepare` reads them; they are not rendered)."""
        turn = self.prepare(observation, history, intro)
        user = self.turn.format(
            observation=turn.observation.text,
            history=self.conversation_history,
            history_length=len(turn.history),
            step=step,
            steps_taken=step - 1,
            admissible=", ".join(turn.observation.admissible or []),
            **turn.fields,
        )
        return (self.invalid_reply.format(error=error) if error else "") + turn.prefix + user

    def prepare(self, observation: Observation, history: list[HistoryEntry], intro: str | None) -> PreparedTurn:
        """The one hook an env family's template overrides: adapt what is shown, add `turn` fields or a prefix."""
        return PreparedTurn(observation, history)


@dataclass(frozen=True)
class PreparedTurn:
    """What a template renders for one turn: the (adapted) observation and history, extra `turn` placeholders, and
    text put before the user message."""

    observation: Observation
    history: list[HistoryEntry]
    fields: dict[str, str] = field(default_factory=dict)
    prefix: str = ""


PROMPTS: Registry[PromptTemplate] = Registry("prompt template")

def prompt_for(env_name: str) -> PromptTemplate:
    """The template registered for an env (error lists the envs that have one)."""
    import agentforge.agent.templates  # noqa: F401  (registers the built-in templates)

    return PROMPTS.get(env_name)
