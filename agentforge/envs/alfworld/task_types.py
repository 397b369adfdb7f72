"""ALFWorld's six task types, their short names (the papers' table columns) and per-type success rates."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agentforge.types import Task, Trajectory


@dataclass(frozen=True)
class TaskType:
    id: int  # ALFWorld's `env.task_types` number
    name: str  # `traj_data["task_type"]`
    short: str  # the column name in the papers' tables
    goal_templates: tuple[str, ...]  # alfworld.gen.goal_library's task sentences (for docs and tests)


TASK_TYPES: tuple[TaskType, ...] = (
    TaskType(1, "pick_and_place_simple", "Pick", ("put a {obj} in {recep}", "put some {obj} on {recep}")),
    TaskType(2, "look_at_obj_in_light", "Look", ("look at {obj} under the {toggle}",
                                                  "examine the {obj} with the {toggle}")),
    TaskType(3, "pick_clean_then_place_in_recep", "Clean", ("put a clean {obj} in {recep}",
                                                             "clean some {obj} and put it in {recep}")),
    TaskType(4, "pick_heat_then_place_in_recep", "Heat", ("put a hot {obj} in {recep}",
                                                           "heat some {obj} and put it in {recep}")),
    TaskType(5, "pick_cool_then_place_in_recep", "Cool", ("put a cool {obj} in {recep}",
                                                           "cool some {obj} and put it in {recep}")),
    TaskType(6, "pick_two_obj_and_place", "Pick2", ("put two {obj} in {recep}",
                                                     "find two {obj} and put them in {recep}")),
)
TASK_TYPES_BY_NAME: dict[str, TaskType] = {t.name: t for t in TASK_TYPES}
TASK_TYPES_BY_SHORT: dict[str, TaskType] = {t.short: t for t in TASK_TYPES}
# The papers' ALFWorld columns, in their order.
COLUMNS: tuple[str, ...] = (*(t.short for t in TASK_TYPES), "All")


def short_name(task_type: str) -> str:
    """`pick_heat_then_place_in_recep` -> `Heat` (a short name is returned unchanged)."""
    if task_type in TASK_TYPES_BY_SHORT:
        return task_type
    try:
        return TASK_TYPES_BY_NAME[task_type].short
    except KeyError:
        valid = ", ".join(TASK_TYPES_BY_NAME)
        raise ValueError(f"unknown ALFWorld task type {task_type!r}; valid: {valid}") from None


def trajectory_task_type(trajectory: Trajectory, lookup: Callable[[Task], str] | None = None) -> str | None:
    """The short task type of an episode: from any executed turn's env info, else from `lookup(task)`."""
    for turn in trajectory.turns:
        task_type = turn.info.get("task_type")
        if task_type:
            return short_name(task_type)
    return short_name(lookup(trajectory.task)) if lookup is not None else None


def success_by_task_type(
    trajectories: Iterable[Trajectory], env_options: dict[str, Any] | None = None
) -> dict[str, float]:
    """Success rate per task type in the papers' columns (Pick, Look, Clean, Heat, Cool, Pick2, All).

    A column with no episodes is left out (All is always there). Episodes whose turns were all invalid carry no
    env info; their task type is looked up from the game the task plays (`env_options` as in the env config).
    """
    from agentforge.envs.alfworld.games import task_type_of

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
