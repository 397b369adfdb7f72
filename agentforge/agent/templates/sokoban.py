"""Sokoban prompt."""

from __future__ import annotations

from agentforge.agent.prompts import PROMPTS, PromptTemplate, StrategyPrompt

SOKOBAN = PROMPTS.register("sokoban")(
    PromptTemplate(
        strategy=StrategyPrompt(
            guidance="where the box must go, which side of the box you must stand on before each push, the order of "
            "your pushes, and which walls and corners to keep the box away from.",
            example="The target is two cells right of the box. Walk around to the left side of the box, then push it "
            "right twice. Never push it against the top wall.",
        ),
        system=(
            "You are an expert Sokoban player. You move the player P on a grid. Walls # block you. Walking into a "
            "box X pushes it one cell if the cell behind it is free. The goal: push every box onto a target O. "
            "A box cannot be pulled, so never push a box into a corner."
        ),
        turn=(
            "You have taken {steps_taken} step(s). Your last {history_length} observations and actions:\n{history}\n\n"
            "Current observation (step {step}):\n{observation}\n\n"
            "Admissible actions: {admissible}.\n"
            "First think briefly inside <think> </think>, then give exactly one action inside <action> </action>, "
            "for example <think>The box is right of me and the target is right of the box.</think>"
            "<action>right</action>"
        ),
        think_only=(
            "The move for this step is already chosen: {action}. Explain briefly inside <think> </think> why this "
            "move helps push the box onto the target; write only the reasoning and stop after </think>."
        ),
        few_shot=[
            {
                "role": "user",
                "content": "Current observation:\n#####\n#P X O#\n#####\nAdmissible actions: up, down, left, right.",
            },
            {"role": "assistant", "content": "<think>The box is to my right, the target beyond it.</think>"
             "<action>right</action>"},
        ],
    )
)
