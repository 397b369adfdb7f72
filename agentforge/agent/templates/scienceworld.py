"""ScienceWorld prompt. The env puts the task into every observation (`Task: …` + blank line + text) so it survives
the history window; this template shows it once, above the turn, and strips it from the history entries.

The action grammar is in the system prompt instead of an admissible list: with `admissible: true` the simulator's
list runs to 100-600 actions (1-4k tokens), too long for a prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from agentforge.agent.prompts import PROMPTS, HistoryEntry, PreparedTurn, PromptTemplate, StrategyPrompt
from agentforge.envs.scienceworld.text import split_task
from agentforge.types import Observation

ACTION_GRAMMAR = (
    "look around; look at OBJ; look in OBJ; read OBJ; inventory; task (repeat the task); "
    "go to LOC (a neighbouring room); teleport to LOC (any room, in the easy setting); "
    "open OBJ; close OBJ; pick up OBJ; put down OBJ; move OBJ to OBJ; pour OBJ in OBJ; dunk OBJ in OBJ; mix OBJ; "
    "activate OBJ; deactivate OBJ; use OBJ on OBJ; connect OBJ to OBJ; disconnect OBJ; eat OBJ; flush OBJ; "
    "wait (ten time steps); wait1 (one time step); focus on OBJ"
)


@dataclass(frozen=True)
class TaskHeaderTemplate(PromptTemplate):
    """A template for envs whose observations repeat the task: shown once as `task_header`, not in the history."""

    task_header: str = "Your task: {task}\n\n"

    def prepare(self, observation: Observation, history: list[HistoryEntry], intro: str | None) -> PreparedTurn:
        task, current = split_task(observation.text)
        shortened = [HistoryEntry(split_task(h.observation)[1], h.action) for h in history]
        prefix = self.task_header.format(task=task) if task is not None else ""
        return PreparedTurn(replace(observation, text=current), shortened, prefix=prefix)


SCIENCEWORLD = PROMPTS.register("scienceworld")(
    TaskHeaderTemplate(
        strategy=StrategyPrompt(
            guidance="the experiment in order: which room and objects you need, the actions to take with them (find, "
            "move, activate, measure, focus), and how you will know the task is done.",
            example="Go to the kitchen to find a thermometer and the substance. Focus on the substance, heat it on the "
            "stove and read the thermometer after each step until it changes state.",
        ),
        system=(
            "You are an agent in ScienceWorld, a text simulation of a house (kitchen, bathroom, workshop, greenhouse, "
            "outside, ...) where you carry out elementary science experiments. Complete the task with one action "
            f"per turn. Actions, where OBJ and LOC are names as the observations write them: {ACTION_GRAMMAR}. "
            "`focus on OBJ` tells the judge which object the task is about: focusing on a wrong object fails the "
            "task at once, so focus only on the object the task names, and only when you are sure. Actions take "
            "time: water heats, plants grow and lights stay on while you act."
        ),
        turn=(
            "You have taken {steps_taken} step(s). Your last {history_length} observations and actions:\n{history}\n\n"
            "Current observation (step {step}):\n{observation}\n\n"
            "First think briefly inside <think> </think>, then give exactly one action inside <action> </action>, "
            "for example <think>I need a thermometer; the kitchen may have one.</think>"
            "<action>teleport to kitchen</action>"
        ),
        few_shot=[
            {
                "role": "user",
                "content": "Your task: Your task is to find a(n) animal. First, focus on the thing. Then, move it to "
                "the red box in the kitchen.\n\nCurrent observation:\nThis room is called the hallway. In it, you "
                "see:\n\tthe agent\n\ta substance called air\nYou also see:\n\tA door to the kitchen (that is open)"
                "\n\tA door to the outside (that is open)",
            },
            {"role": "assistant", "content": "<think>Animals live outside; I go there and look.</think>"
             "<action>teleport to outside</action>"},
        ],
    )
)
