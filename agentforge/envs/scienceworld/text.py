"""The ScienceWorld observation text format, shared by the env and its prompt template (no JVM, no package import).

Every observation is `Task: <task description>` + a blank line + the simulator's text, so the goal is never lost
when the history window drops the first turn; the template shows the task once and strips it from history entries.
"""

from __future__ import annotations

TASK_PREFIX = "Task: "
SEPARATOR = "\n\n"


def observation_text(task_description: str, observation: str) -> str:
    """The text the agent sees: the task, then the simulator's observation."""
    return f"{TASK_PREFIX}{' '.join(task_description.split())}{SEPARATOR}{observation.strip()}"


def split_task(text: str) -> tuple[str | None, str]:
    """(task description, observation) of an observation text; (None, text) for text not in this format."""
    if not text.startswith(TASK_PREFIX) or SEPARATOR not in text:
        return None, text
    head, body = text.split(SEPARATOR, 1)
    return head[len(TASK_PREFIX) :], body
