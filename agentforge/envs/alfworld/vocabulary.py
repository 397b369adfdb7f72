"""ALFRED's object and receptacle classes and their affordances, read from the ALFWorld package itself.

Which receptacle can hold which object (`canContain`), what can be cleaned, heated, cooled or toggled: all from
`alfworld.gen.constants` (the tables ALFRED generated its scenes with), so generated games follow the real rules.
"""

from __future__ import annotations

from alfworld.gen import constants as _c

STATIC_RECEPTACLES: frozenset[str] = frozenset(set(_c.RECEPTACLES) - set(_c.MOVABLE_RECEPTACLES))
MOVABLE_RECEPTACLES: frozenset[str] = frozenset(_c.MOVABLE_RECEPTACLES)
OPENABLE: frozenset[str] = frozenset(_c.OPENABLE_CLASS_SET)

# canContain: receptacle class -> object classes it accepts (sliced variants dropped: slicing is not generated).
CAN_CONTAIN: dict[str, frozenset[str]] = {
    rtype: frozenset(o for o in objects if not o.endswith("Sliced"))
    for rtype, objects in _c.VAL_RECEPTACLE_OBJECTS.items()
    if rtype in STATIC_RECEPTACLES
}
# Objects some static receptacle accepts: the ones a game can place, take and move.
PICKUPABLE: frozenset[str] = frozenset().union(*CAN_CONTAIN.values())

CLEANABLE: frozenset[str] = frozenset(_c.VAL_ACTION_OBJECTS["Cleanable"])
HEATABLE: frozenset[str] = frozenset(_c.VAL_ACTION_OBJECTS["Heatable"])
COOLABLE: frozenset[str] = frozenset(_c.VAL_ACTION_OBJECTS["Coolable"])
TOGGLEABLE: frozenset[str] = frozenset(_c.VAL_ACTION_OBJECTS["Toggleable"])  # DeskLamp, FloorLamp

# Every class constant a problem declares: `<Class>Type - otype` / `<Class>Type - rtype`. The domain names
# SinkBasinType, MicrowaveType, FridgeType, KnifeType and ButterKnifeType in its actions, so all must exist.
OTYPES: tuple[str, ...] = tuple(sorted((set(_c.OBJECTS) | MOVABLE_RECEPTACLES) - STATIC_RECEPTACLES))
RTYPES: tuple[str, ...] = tuple(sorted(STATIC_RECEPTACLES))

# Scene types each task type is generated in (ALFRED's GOALS_VALID).
GOALS_VALID: dict[str, frozenset[str]] = {goal: frozenset(rooms) for goal, rooms in _c.GOALS_VALID.items()}

# Where a lamp stands in a generated scene. THOR lamps sit on furniture; ALFWorld's `use` needs the lamp to be in
# a receptacle at the agent's location, so a lamp is placed in one of these (project choice, see README).
LAMP_HOSTS: dict[str, tuple[str, ...]] = {
    "DeskLamp": ("Desk", "SideTable", "Dresser", "Shelf", "TVStand", "CoffeeTable", "DiningTable"),
    "FloorLamp": ("SideTable", "Dresser", "ArmChair", "Sofa", "Desk", "CoffeeTable", "TVStand"),
}
