"""StraTA's extra prompts: the strategy prompt (one per env family) and the critical self-judgment prompt, and the
parsers of their answers.

The strategy prompt is shown once, before turn 1, with the env's own system prompt and the episode's initial
observation (adapted by the env's template, e.g. WebShop's search hint), so the policy writes a plan in the same
voice it then acts in. The judgment prompt shows the strategy and the episode step by step and asks for the numbers
of the steps that neither helped success nor followed the strategy. Both parsers never raise: a malformed answer
comes back marked as such (a strategy then takes the format penalty, a judgment flags nothing and is counted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentforge.agent.parsing import find_tags
from agentforge.agent.prompts import PROMPTS, PromptTemplate, StrategyPrompt, prompt_for
from agentforge.types import Observation, Trajectory

STRATEGY_TAG = "strategy"
JUDGMENT_TAG = "flagged"
NO_STRATEGY = "(no strategy)"


GENERIC_STRATEGY = StrategyPrompt(
    guidance="the sub-goals that lead to success, in order, and the mistakes to avoid.",
    example="First find what the task needs, then use it as the task says, then finish.",
)

STRATEGY_REQUEST = (
    "{observation}{admissible}\n\n"
    "Before you take any action, write a global strategy for this whole episode: {guidance} Keep it to a few short "
    "sentences and do not give an action yet. Write the strategy inside <strategy> </strategy>, for example "
    "<strategy>{example}</strategy>"
)
STRATEGY_NOTE = "Your strategy for this episode (follow it):\n{strategy}"
MAX_ADMISSIBLE_SHOWN = 40

JUDGMENT_SYSTEM = (
    "You review an agent's episode critically and honestly. A step is useless when it neither helps to solve the "
    "task nor follows the agent's strategy."
)
JUDGMENT_REQUEST = (
    "The agent committed to this strategy:\n{strategy}\n\n"
    "The task, as first shown to the agent:\n{intro}\n\n"
    "The agent's steps:\n{steps}\n\n"
    "Outcome: {outcome}\n\n"
    "List the numbers of the steps that neither helped to solve the task nor followed the strategy. Answer inside "
    "<flagged> </flagged> with the step numbers separated by commas, or <flagged>none</flagged> when every step was "
    "useful, for example <flagged>2, 5</flagged>"
)


def strategy_prompt_for(env_name: str) -> StrategyPrompt:
    """The env family's strategy prompt (its template's `strategy`); an env without one gets a generic request
    (still a strategy)."""
    import agentforge.agent.templates  # noqa: F401  (registers the built-in templates)

    if env_name not in PROMPTS:
        return GENERIC_STRATEGY
    return prompt_for(env_name).strategy or GENERIC_STRATEGY


def strategy_messages(template: PromptTemplate, prompt: StrategyPrompt, observation: Observation,
                      show_admissible: bool = True) -> list[dict[str, str]]:
    """The strategy turn's chat: the env's system prompt, then its initial observation as its template shows it."""
    shown = template.prepare(observation, [], observation.text).observation
    admissible = ""
    if show_admissible and shown.admissible:
        listed = shown.admissible[:MAX_ADMISSIBLE_SHOWN]
        more = " ..." if len(shown.admissible) > len(listed) else ""
        admissible = f"\n\nAdmissible actions now: {', '.join(listed)}{more}."
    user = STRATEGY_REQUEST.format(observation=shown.text, admissible=admissible, guidance=prompt.guidance,
                                   example=prompt.example)
    return [{"role": "system", "content": template.system}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class ParsedStrategy:
    """`text` is what the action prompts show; `format_ok` only for a closed, non-empty <strategy> tag."""

    text: str
    format_ok: bool


_OPEN_STRATEGY = re.compile(rf"<{STRATEGY_TAG}>", re.IGNORECASE)


def _squash(text: str) -> str:
    return " ".join(text.split())


def parse_strategy(text: str) -> ParsedStrategy:
    """The strategy inside <strategy>…</strategy>. A response cut off inside the tag (over its token budget) or
    without the tag still yields text to show (the tag's content, else the whole response), marked not ok."""
    closed = find_tags(text, STRATEGY_TAG, first_only=True)
    if closed and _squash(closed[0].body):
        return ParsedStrategy(_squash(closed[0].body), True)
    opened = _OPEN_STRATEGY.search(text)
    body = _squash(re.sub(r"</?\w+>", " ", text[opened.end():] if opened else text))
    return ParsedStrategy(body or NO_STRATEGY, False)


def strategy_note(strategy: str) -> str:
    return STRATEGY_NOTE.format(strategy=strategy)


# ---- critical self-judgment -----------------------------------------------------------------------------------------
def _clip(text: str, chars: int) -> str:
    text = _squash(text)
    return text if len(text) <= chars else text[: max(chars - 3, 0)] + "..."


def judgment_messages(trajectory: Trajectory, strategy: str, observation_chars: int | None,
                      intro_chars: int = 600) -> list[dict[str, str]]:
    """The judgment chat of one finished episode. Each step shows the observation it was taken in (clipped to
    `observation_chars`; None leaves observations out, for episodes too long to show them) and the action."""
    lines = []
    for number, turn in enumerate(trajectory.turns, start=1):
        executed = bool(turn.info.get("executed", turn.valid))
        action = turn.action if executed and turn.action else f"(invalid response: {turn.action or 'no action'})"
        seen = f" | saw: {_clip(turn.observation, observation_chars)}" if observation_chars else ""
        lines.append(f"Step {number}{seen} | did: {action}")
    intro = trajectory.turns[0].observation if trajectory.turns else ""
    outcome = "the task was solved." if trajectory.won else "the task was not solved."
    user = JUDGMENT_REQUEST.format(strategy=strategy, intro=_clip(intro, intro_chars), steps="\n".join(lines),
                                   outcome=outcome)
    return [{"role": "system", "content": JUDGMENT_SYSTEM}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class ParsedJudgment:
    """`flagged`: 1-based step numbers (sorted, unique, within the episode); None when the answer is unparseable.
    `out_of_range`: numbers the answer gave that the episode does not have (dropped)."""

    flagged: tuple[int, ...] | None
    out_of_range: int = 0

    @property
    def ok(self) -> bool:
        return self.flagged is not None


_STEP_NUMBER = re.compile(r"^(?:step\s*)?(\d+)$", re.IGNORECASE)
MAX_STEP_DIGITS = 9  # longer numbers are out of range for any episode (and int() refuses > 4300 digits)


def _step_number(digits: str) -> int:
    """A step number from decimal digits (any script's); absurdly long ones become 0, i.e. out of range."""
    return int(digits) if len(digits) <= MAX_STEP_DIGITS else 0


def parse_judgment(text: str, num_steps: int) -> ParsedJudgment:
    """Step numbers inside <flagged>…</flagged> (`none` or nothing: no step). Anything else inside the tag that is
    not a step number, or no tag at all, makes the judgment unparseable: it flags nothing."""
    found = find_tags(text, JUDGMENT_TAG, first_only=True)
    if not found:
        return ParsedJudgment(None)
    body = found[0].body.strip().strip(".")
    if not body or body.lower() in ("none", "no steps", "nothing"):
        return ParsedJudgment(())
    numbers: list[int] = []
    for piece in re.split(r"[,;]", body):
        piece = piece.strip().strip(".")
        if not piece:
            continue
        match = _STEP_NUMBER.match(piece)
        if match is not None:
            numbers.append(_step_number(match.group(1)))
        elif all(part.isdecimal() for part in piece.split()):  # isdigit() would pass '²', which int() refuses
            numbers.extend(_step_number(part) for part in piece.split())
        else:
            return ParsedJudgment(None)
    inside = sorted({n for n in numbers if 1 <= n <= num_steps})
    return ParsedJudgment(tuple(inside), out_of_range=len({n for n in numbers if not 1 <= n <= num_steps}))

