"""ALFWorld prompt, after verl-agent's ALFWorld template (the GiGPO/TJPO setup): the task, the last K
observations and actions, the current observation and the admissible actions, then think and act.

The env's observations are the game's raw text; only the first one states the task ("Your task is to: ..."). The
template repeats the task in every turn: from `intro` (the episode's first observation) when the agent loop passes
it, else from the current observation or the history window. The TextWorld welcome banner is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from agentforge.agent.prompts import PROMPTS, HistoryEntry, PreparedTurn, PromptTemplate, StrategyPrompt
from agentforge.types import Observation

TASK_MARKER = "Your task is to: "
BANNER = "-= Welcome to TextWorld, ALFRED! =-"
UNKNOWN_TASK = "(stated in the first observation)"


def find_task(*texts: str | None) -> str | None:
    """The task sentence from the first text that states one."""
    for text in texts:
        if text and TASK_MARKER in text:
            return text.split(TASK_MARKER, 1)[1].split("\n", 1)[0].strip()
    return None


def clean_observation(text: str) -> str:
    return text.replace(BANNER, "").strip()


@dataclass(frozen=True)
class AlfWorldTemplate(PromptTemplate):
    """`turn` may use `{task}` besides the base placeholders."""

    def prepare(self, observation: Observation, history: list[HistoryEntry], intro: str | None) -> PreparedTurn:
        task = find_task(intro, observation.text, *(h.observation for h in history)) or UNKNOWN_TASK
        entries = [HistoryEntry(clean_observation(h.observation), h.action) for h in history]
        return PreparedTurn(replace(observation, text=clean_observation(observation.text)), entries, {"task": task})


ALFWORLD = PROMPTS.register("alfworld")(
    AlfWorldTemplate(
        strategy=StrategyPrompt(
            guidance="the sub-goals in order: where the object you need is most likely to be (which receptacles to "
            "search first), what to do with it (clean, heat, cool or examine it) and where to put it.",
            example="Mugs are usually on countertops or in cabinets: check countertop 1, then the cabinets. Take the "
            "mug, clean it at the sinkbasin, then go to the coffeemachine and put it there.",
        ),
        system=(
            "You are an expert agent operating in the ALFRED Embodied Environment, a household shown as text. "
            "You go to receptacles (go to X), open and close them, take objects from them, move objects to them, "
            "clean objects with a sinkbasin, heat them with a microwave, cool them with a fridge, and use lamps. "
            "Objects may be hidden in closed receptacles: open them to look inside. Only admissible actions work."
        ),
        turn=(
            "Your task is to: {task}\n"
            "Prior to this step, you have already taken {steps_taken} step(s). Below are the most recent "
            "{history_length} observations and the corresponding actions you took:\n{history}\n\n"
            "You are now at step {step} and your current observation is:\n{observation}\n\n"
            "Your admissible actions of the current situation are: [{admissible}].\n\n"
            "Now it's your turn to take an action. First reason step by step about the current situation inside "
            "<think> </think>, then choose one admissible action for the current step and present it inside "
            "<action> </action>, for example <think>The apple may be in the fridge.</think>"
            "<action>go to fridge 1</action>"
        ),
        think_only=(
            "The action for the current step is already chosen: {action}. Reason step by step about the current "
            "situation and why this action serves the task, inside <think> </think>; write only the reasoning and "
            "stop after </think>."
        ),
        few_shot=[
            {
                "role": "user",
                "content": "Your task is to: put a clean mug in coffeemachine.\nYour current observation is:\n"
                "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a coffeemachine "
                "1, a countertop 1, a fridge 1, a sinkbasin 1.\nYour admissible actions of the current situation "
                "are: [go to cabinet 1, go to coffeemachine 1, go to countertop 1, go to fridge 1, go to sinkbasin "
                "1, inventory, look].",
            },
            {"role": "assistant", "content": "<think>Mugs are often on the countertop; I look there first.</think>"
             "<action>go to countertop 1</action>"},
        ],
    )
)

# The intervention env shows ALFWorld's own text (plus a constraint or an unavailability notice): the same prompt.
PROMPTS.register("alfworld_intervention")(ALFWORLD)
