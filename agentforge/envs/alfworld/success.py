"""Success rate per ALFWorld task type, in the papers' table columns."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentforge.envs.alfworld.games import task_type_of
from agentforge.envs.alfworld.task_types import COLUMNS, trajectory_task_type
from agentforge.types import Task, Trajectory


def success_by_task_type(
    trajectories: Iterable[Trajectory], env_options: dict[str, Any] | None = None
) -> dict[str, float]:
    """Success rate per task type in the papers' columns (Pick, Look, Clean, Heat, Cool, Pick2, All).

    A column with no episodes is left out (All is always there). Episodes whose turns were all invalid carry no
    env info; their task type is looked up from the game the task plays (`env_options` as in the env config).
    """
    def lookup(task: Task) -> str:
        return task_type_of(task, env_options or {})

    wins: dict[str, list[bool]] = {}
    everything: list[bool] = []
    for trajectory in trajectories:
        column = trajectory_task_type(trajectory, lookup)
        wins.setdefault(column or "unknown", []).append(bool(trajectory.won))
        everything.append(bool(trajectory.won))
    out = {c: sum(wins[c]) / len(wins[c]) for c in COLUMNS[:-1] if wins.get(c)}
    out["All"] = sum(everything) / len(everything) if everything else 0.0
    return out
