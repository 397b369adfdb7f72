"""Sample an ALFWorld game: a task of a given type for a real floor plan, and objects placed to fit it.

Follows ALFRED's sampler: the task type must be valid for the room type (GOALS_VALID); the target must afford the
task (cleanable, heatable, coolable); the parent receptacle must accept the target and must not be the appliance
the task uses; every pickupable class of the scene gets instances (the target 1-3), each in a receptacle that
accepts it; the target never starts in a receptacle of the parent class, so no goal holds at the start.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agentforge.envs.alfworld import vocabulary as v
from agentforge.envs.alfworld.problem import Goal, Scene, SceneObject
from agentforge.envs.alfworld.scenes import FloorPlan, Receptacle

MAX_INSTANCES = 3  # alfworld.gen.constants.MAX_NUM_OF_OBJ_INSTANCES (for the target class)
# Other classes get a second instance with this probability: scenes of ~20-40 objects, the size of the real
# ALFWorld problems (the planner's time grows steeply with the object count).
EXTRA_INSTANCE_P = 0.25
# What the target must afford, and which parent classes a task type may not use (ALFRED's sampler).
REQUIRED_AFFORDANCE: dict[str, frozenset[str]] = {
    "pick_clean_then_place_in_recep": v.CLEANABLE,
    "pick_heat_then_place_in_recep": v.HEATABLE,
    "pick_cool_then_place_in_recep": v.COOLABLE,
}
REQUIRED_APPLIANCE: dict[str, str] = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
INVALID_PARENTS: dict[str, frozenset[str]] = {
    "pick_clean_then_place_in_recep": frozenset({"SinkBasin"}),
    "pick_heat_then_place_in_recep": frozenset({"Microwave"}),
    "pick_cool_then_place_in_recep": frozenset({"Fridge"}),
    "pick_two_obj_and_place": frozenset({"CoffeeMachine", "ToiletPaperHanger", "HandTowelHolder"}),
}


class NoGoal(Exception):
    """The floor plan cannot host a task of this type."""


@dataclass(frozen=True)
class SampledGame:
    scene: Scene
    goal: Goal


def _hosts(plan: FloorPlan, otype: str) -> list[Receptacle]:
    return [r for r in plan.receptacles if otype in v.CAN_CONTAIN.get(r.rtype, ())]


def _lamp_hosts(plan: FloorPlan, lamp: str) -> list[Receptacle]:
    return [r for r in plan.receptacles if r.rtype in v.LAMP_HOSTS[lamp]]


def task_supported(plan: FloorPlan, task_type: str) -> bool:
    """Whether the room type allows the task type and the scene has what it needs (appliance, lamp)."""
    if plan.scene_type not in v.GOALS_VALID[task_type]:
        return False
    appliance = REQUIRED_APPLIANCE.get(task_type)
    if appliance and appliance not in plan.receptacle_types:
        return False
    if task_type == "look_at_obj_in_light":
        return any(c in v.TOGGLEABLE and _lamp_hosts(plan, c) for c in plan.object_classes)
    return True


def sample_goal(plan: FloorPlan, task_type: str, rng: random.Random) -> Goal:
    """A goal of `task_type` the scene can host, drawn uniformly over valid (object, parent/lamp) pairs."""
    if not task_supported(plan, task_type):
        raise NoGoal(f"FloorPlan{plan.number} ({plan.scene_type}) cannot host {task_type}")
    pickable = [c for c in plan.object_classes if c in v.PICKUPABLE and _hosts(plan, c)]
    if task_type == "look_at_obj_in_light":
        lamps = [c for c in plan.object_classes if c in v.TOGGLEABLE and _lamp_hosts(plan, c)]
        pairs = [(obj, lamp) for obj in pickable for lamp in lamps]
        if not pairs:
            raise NoGoal(f"FloorPlan{plan.number} has no object to look at")
        obj, lamp = rng.choice(pairs)
        return Goal(task_type, obj, toggle_target=lamp)
    affordance = REQUIRED_AFFORDANCE.get(task_type)
    invalid = INVALID_PARENTS.get(task_type, frozenset())
    pairs = []
    for obj in pickable:
        if affordance is not None and obj not in affordance:
            continue
        hosts = _hosts(plan, obj)
        for parent in sorted({r.rtype for r in hosts} - invalid):
            # The target must be able to start somewhere other than a receptacle of the parent class.
            if any(r.rtype != parent for r in hosts):
                pairs.append((obj, parent))
    if not pairs:
        raise NoGoal(f"FloorPlan{plan.number} has no (object, receptacle) pair for {task_type}")
    obj, parent = rng.choice(pairs)
    return Goal(task_type, obj, parent_target=parent)


def _object_id(otype: str, host: Receptacle, rng: random.Random, taken: set[str]) -> str:
    """A THOR-style id near the host receptacle (ids only need to be unique; names come from the demangler)."""
    x, y, z = (float(p) for p in host.thor_id.split("|")[1:4])
    while True:
        xyz = (x + rng.uniform(-0.3, 0.3), y + rng.uniform(0.0, 0.3), z + rng.uniform(-0.3, 0.3))
        thor_id = "|".join([otype, *(f"{c:+06.2f}" for c in xyz)])
        if thor_id not in taken:
            taken.add(thor_id)
            return thor_id


def populate(plan: FloorPlan, goal: Goal, rng: random.Random) -> Scene:
    """Place every pickupable class of the scene (1-3 instances) and the goal's lamp; pick the agent's start."""
    objects: list[SceneObject] = []
    taken: set[str] = set()
    for otype in plan.object_classes:
        if otype in v.TOGGLEABLE:
            hosts = _lamp_hosts(plan, otype)
            if hosts:
                host = rng.choice(hosts)
                objects.append(SceneObject(_object_id(otype, host, rng, taken), otype, host.thor_id))
            continue
        if otype not in v.PICKUPABLE:
            continue
        hosts = _hosts(plan, otype)
        if otype == goal.object_target:
            hosts = [r for r in hosts if r.rtype != goal.parent_target]
            count = rng.randint(2, MAX_INSTANCES) if goal.task_type == "pick_two_obj_and_place" else rng.randint(
                1, MAX_INSTANCES)
        else:
            count = 2 if rng.random() < EXTRA_INSTANCE_P else 1
        for _ in range(count if hosts else 0):
            host = rng.choice(hosts)
            objects.append(SceneObject(_object_id(otype, host, rng, taken), otype, host.thor_id))
    used = {r.location for r in plan.receptacles}
    while True:
        start = f"loc|{rng.randint(-12, 12)}|{rng.randint(-12, 12)}|{rng.randint(0, 3)}|{rng.choice((0, 30))}"
        if start not in used:
            break
    return Scene(plan, objects, start)


def sample_game(plan: FloorPlan, task_type: str, rng: random.Random) -> SampledGame:
    goal = sample_goal(plan, task_type, rng)
    return SampledGame(populate(plan, goal, rng), goal)
