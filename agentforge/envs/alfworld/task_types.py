"""ALFWorld's six task types, their short names (the papers' table columns) and how a trajectory's type is read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
