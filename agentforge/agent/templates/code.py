"""The code env's prompt (tool-integrated reasoning, as ReTool): `<python>code</python>` runs code in the sandbox,
`<answer>number</answer>` answers, after `<think>…</think>`; the parser turns them into the env's `python[code]` /
`answer[number]` actions and keeps the code's newlines and indentation."""

from __future__ import annotations

from agentforge.agent.prompts import PROMPTS, PromptTemplate, StrategyPrompt

CODE = PROMPTS.register("code")(
    PromptTemplate(
        strategy=StrategyPrompt(
            guidance="what to compute with Python and what to print, then which printed number is the answer.",
            example="Compute the sum with one line of Python, print it, then answer with the printed number.",
        ),
        system=(
            "You solve math problems exactly. You have a Python interpreter (standard library only, no network, "
            "no files kept between runs): write a short program that prints the result, read its output, then "
            "answer with the number alone."
        ),
        turn=(
            "Your last {history_length} observations and actions:\n{history}\n\n"
            "Current observation (step {step}):\n{observation}\n\n"
            "First think briefly inside <think> </think>, then either run Python with <python>code</python> or "
            "answer and finish with <answer>number</answer>, for example <think>This is easier to compute exactly "
            "with Python; print the result.</think><python>print(1234 * 5678)</python> or <think>The code printed "
            "7006652, so that is the answer.</think><answer>7006652</answer>"
        ),
        no_history="(none yet)",
        action_tag="python|answer",
        keep_whitespace=True,
        few_shot=[
            {"role": "user", "content": "Current observation:\nQuestion: Compute 1234 * 5678 - 99.\n"
             "You have 4 turn(s) left."},
            {"role": "assistant", "content": "<think>This is easier to compute exactly with Python; print the "
             "result.</think><python>print(1234 * 5678 - 99)</python>"},
        ],
    )
)
