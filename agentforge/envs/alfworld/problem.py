"""Write a scene and a goal as an ALFWorld PDDL problem, in the layout of the real `initial_state.pddl` files.

Traps that make the engine or the planner fail (FACTS.md), all handled here: the sections come in the order
objects, init, goal (no `:metric` first); every `<Class>Type` constant is declared exactly once as an otype or an
rtype; each receptacle has a location of its own; objects need `pickupable` and types need `canContain` facts or
nothing can be taken or put. Ids are mangled the way ALFRED writes them (`Cabinet|+00.68|..` ->
`Cabinet_bar__plus_00_dot_68_bar_..`), which `AlfredDemangler` turns into names like `cabinet 1`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentforge.envs.alfworld.scenes import FloorPlan
from agentforge.envs.alfworld.task_types import TASK_TYPES_BY_NAME

_MANGLE = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}


def mangle(thor_id: str) -> str:
    """ALFRED's `fix_pddl_str_chars` for ids: every special character replaced in one pass."""
    return "".join(_MANGLE.get(ch, ch) for ch in thor_id)


@dataclass(frozen=True)
class SceneObject:
    thor_id: str
    otype: str
    receptacle: str  # thor id of the receptacle it is in


@dataclass
class Scene:
    """A floor plan populated with objects and an agent start location."""

    floor_plan: FloorPlan
    objects: list[SceneObject] = field(default_factory=list)
    agent_location: str = "loc|0|0|0|0"

    def receptacle_location(self, thor_id: str) -> str:
        for receptacle in self.floor_plan.receptacles:
            if receptacle.thor_id == thor_id:
                return receptacle.location
        raise KeyError(thor_id)


@dataclass(frozen=True)
class Goal:
    """ALFRED's task parameters (`pddl_params`): target object, parent receptacle, lamp."""

    task_type: str
    object_target: str
    parent_target: str = ""
    toggle_target: str = ""

    def pddl_params(self) -> dict[str, object]:
        return {
            "object_target": self.object_target,
            "parent_target": self.parent_target,
            "toggle_target": self.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        }


def goal_pddl(goal: Goal) -> str:
    """The goal section from the package's goal library (`alfworld.gen.goal_library`), filled like ALFRED does."""
    from alfworld.gen import goal_library

    template = goal_library.gdict[TASK_TYPES_BY_NAME[goal.task_type].name]["pddl"]
    text = template.format(obj=goal.object_target, recep=goal.parent_target, toggle=goal.toggle_target, mrecep="")
    return text.replace("#", "-")


def problem_pddl(scene: Scene, goal: Goal, problem_name: str) -> str:
    """The full problem text: objects, init, goal (the goal library's text closes the `define`)."""
    from agentforge.envs.alfworld import vocabulary as v

    receptacles = scene.floor_plan.receptacles
    objects = scene.objects
    object_types = sorted({o.otype for o in objects})
    receptacle_types = sorted({r.rtype for r in receptacles})
    locations = sorted({r.location for r in receptacles} | {scene.agent_location})
    location_of = {r.thor_id: r.location for r in receptacles}
    rtype_of = {r.thor_id: r.rtype for r in receptacles}

    declared = (
        ["agent1 - agent"]
        + [f"{t}Type - otype" for t in v.OTYPES]
        + [f"{t}Type - rtype" for t in v.RTYPES]
        + [f"{mangle(o.thor_id)} - object" for o in objects]
        + [f"{mangle(r.thor_id)} - receptacle" for r in receptacles]
        + [f"{mangle(loc)} - location" for loc in locations]
    )
    init: list[str] = []
    init += [f"(receptacleType {mangle(r.thor_id)} {r.rtype}Type)" for r in receptacles]
    init += [f"(objectType {mangle(o.thor_id)} {o.otype}Type)" for o in objects]
    init += [
        f"(canContain {rt}Type {ot}Type)"
        for rt in receptacle_types
        for ot in object_types
        if ot in v.CAN_CONTAIN.get(rt, ())
    ]
    init += [f"(pickupable {mangle(o.thor_id)})" for o in objects if o.otype in v.PICKUPABLE]
    init += [f"(isReceptacleObject {mangle(o.thor_id)})" for o in objects if o.otype in v.MOVABLE_RECEPTACLES]
    init += [f"(openable {mangle(r.thor_id)})" for r in receptacles if r.rtype in v.OPENABLE]
    init.append(f"(atLocation agent1 {mangle(scene.agent_location)})")
    init += [f"(cleanable {mangle(o.thor_id)})" for o in objects if o.otype in v.CLEANABLE]
    init += [f"(heatable {mangle(o.thor_id)})" for o in objects if o.otype in v.HEATABLE]
    init += [f"(coolable {mangle(o.thor_id)})" for o in objects if o.otype in v.COOLABLE]
    # ALFRED marks target objects that start in a fridge as already cool.
    init += [
        f"(isCool {mangle(o.thor_id)})"
        for o in objects
        if o.otype == goal.object_target and rtype_of[o.receptacle] == "Fridge"
    ]
    # As in ALFRED's problems, only lamps of the goal's class are toggleable.
    init += [f"(toggleable {mangle(o.thor_id)})" for o in objects if o.otype == (goal.toggle_target or None)]
    init += [f"(inReceptacle {mangle(o.thor_id)} {mangle(o.receptacle)})" for o in objects]
    init += [f"(receptacleAtLocation {mangle(r.thor_id)} {mangle(r.location)})" for r in receptacles]
    init += [f"(objectAtLocation {mangle(o.thor_id)} {mangle(location_of[o.receptacle])})" for o in objects]

    indent = "\n        "
    return (
        f"\n(define (problem plan_{problem_name})\n(:domain alfred)\n(:objects\n"
        f"{indent.join(declared)}\n        )\n\n(:init\n        {indent.join(init)}\n        )\n\n"
        f"{goal_pddl(goal)}"
    )
