"""Real AI2-THOR floor plans as the ALFWorld package ships them: receptacle instances and object inventories.

`alfworld/gen/layouts/FloorPlan<N>-objects.json` lists the object classes present in scene N, and
`FloorPlan<N>-openable.json` maps receptacle instance ids (`Cabinet|+00.68|+00.50|-02.20`) to the pose
(x, z, rotation, horizon) the agent interacts from. Receptacle classes present in the scene but missing from the
pose file (stove burners, toasters, coffee machines ...) get instances with their own poses, so every receptacle
class of the real scene exists in the generated game. The files are read without importing `alfworld`.
"""

from __future__ import annotations

import importlib.util
import json
import random
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from agentforge.errors import AgentforgeError

# ALFRED's scene numbering (alfworld.gen.constants.SCENE_TYPE).
SCENE_TYPES: dict[str, range] = {
    "Kitchen": range(1, 31),
    "LivingRoom": range(201, 231),
    "Bedroom": range(301, 331),
    "Bathroom": range(401, 431),
}
# ALFRED's valid_unseen scenes (one per room type): held out of train and valid_seen, as in the real splits.
UNSEEN_FLOOR_PLANS: tuple[int, ...] = (10, 219, 308, 424)

# How many instances a receptacle class gets when the pose file lacks it (real kitchens have four burners).
DEFAULT_INSTANCES: dict[str, int] = {"StoveBurner": 4}
GRID = 0.25  # AI2-THOR's navigation grid step (alfworld.gen.constants.AGENT_STEP_SIZE)


@dataclass(frozen=True)
class Receptacle:
    """One receptacle instance: its THOR id (`Type|x|y|z` or `Sink|x|y|z|SinkBasin`), class and agent pose."""

    thor_id: str
    rtype: str
    location: str  # `loc|x|z|rotation|horizon` as ALFWorld problems write it (before mangling)


@dataclass(frozen=True)
class FloorPlan:
    number: int
    scene_type: str
    receptacles: tuple[Receptacle, ...]
    object_classes: tuple[str, ...]

    @property
    def receptacle_types(self) -> set[str]:
        return {r.rtype for r in self.receptacles}


def layouts_dir() -> Path:
    """The `alfworld/gen/layouts` folder of the installed package (found without importing it)."""
    spec = importlib.util.find_spec("alfworld")
    if spec is None or spec.origin is None:
        raise AgentforgeError("the ALFWorld package is not installed; run scripts/install_alfworld.sh")
    return Path(spec.origin).parent / "gen" / "layouts"


def scene_type(number: int) -> str:
    for name, numbers in SCENE_TYPES.items():
        if number in numbers:
            return name
    raise AgentforgeError(f"FloorPlan{number} is not an ALFRED scene (kitchens 1-30, living rooms 201-230, ...)")


@cache
def floor_plan_numbers() -> tuple[int, ...]:
    """Every floor plan the package ships a layout for, in numeric order."""
    folder = layouts_dir()
    numbers = []
    for path in folder.glob("FloorPlan*-objects.json"):
        number = int(path.name[len("FloorPlan") : -len("-objects.json")])
        if (folder / f"FloorPlan{number}-openable.json").exists():
            numbers.append(number)
    return tuple(sorted(numbers))


def _location(x: float, z: float, rotation: float, horizon: float) -> str:
    return f"loc|{round(x / GRID)}|{round(z / GRID)}|{round(rotation / 90) % 4}|{round(horizon)}"


def _coordinate(value: float) -> str:
    """THOR's id coordinate format: sign, two integer digits, two decimals (`+00.68`, `-02.20`)."""
    return f"{value:+06.2f}"


def receptacle_class(thor_id: str) -> str:
    """`Cabinet|..` -> Cabinet; basins are named by their last part (`Sink|..|SinkBasin` -> SinkBasin)."""
    parts = thor_id.split("|")
    return parts[-1] if len(parts) == 5 else parts[0]


def _basin_id(thor_id: str, rtype: str) -> str:
    """Basins keep ALFWorld's `<Fixture>|x|y|z|<Basin>` form with the fixture matching the basin class."""
    parts = thor_id.split("|")
    fixture = "Sink" if rtype == "SinkBasin" else "Bathtub"
    return "|".join([fixture, *parts[1:4], rtype])


@cache
def load_floor_plan(number: int) -> FloorPlan:
    """The receptacles (with their agent poses) and object classes of one real floor plan."""
    from agentforge.envs.alfworld.vocabulary import STATIC_RECEPTACLES

    folder = layouts_dir()
    try:
        classes = json.loads((folder / f"FloorPlan{number}-objects.json").read_text())
        poses = json.loads((folder / f"FloorPlan{number}-openable.json").read_text())
    except FileNotFoundError as err:
        raise AgentforgeError(f"the ALFWorld package has no layout for FloorPlan{number}: {err}") from err
    receptacles: list[Receptacle] = []
    used_locations: set[str] = set()

    def add(thor_id: str, rtype: str, location: str) -> None:
        # One receptacle per location: ALFWorld's `go to` lists every receptacle at the target location.
        base, bump = location, 0
        while location in used_locations:
            bump += 1
            x, z, rot, hor = base.split("|")[1:]
            location = f"loc|{x}|{z}|{rot}|{int(hor) + 15 * bump}"
        used_locations.add(location)
        receptacles.append(Receptacle(thor_id, rtype, location))

    for key in sorted(poses):
        rtype = receptacle_class(key)
        if rtype not in STATIC_RECEPTACLES:
            continue
        x, z, rotation, horizon = poses[key]
        add(_basin_id(key, rtype) if rtype.endswith("Basin") else key, rtype, _location(x, z, rotation, horizon))

    present = {r.rtype for r in receptacles}
    # Receptacle classes of the scene that the pose file does not list: instances at reproducible made-up poses.
    missing = sorted(c for c in classes if c in STATIC_RECEPTACLES and c not in present)
    if "Sink" in classes and "SinkBasin" not in present and "SinkBasin" not in missing:
        missing.append("SinkBasin")
    rng = random.Random(f"FloorPlan{number}")
    for rtype in missing:
        for _ in range(DEFAULT_INSTANCES.get(rtype, 1)):
            xyz = [rng.uniform(-3.0, 3.0), rng.uniform(0.0, 1.5), rng.uniform(-3.0, 3.0)]
            prefix = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}.get(rtype, rtype)
            thor_id = "|".join([prefix, *map(_coordinate, xyz)] + ([rtype] if rtype.endswith("Basin") else []))
            add(thor_id, rtype, _location(xyz[0], xyz[2], rng.choice([0, 90, 180, 270]), rng.choice([0, 30, 60])))
    object_classes = tuple(sorted(set(classes) - STATIC_RECEPTACLES))
    return FloorPlan(number, scene_type(number), tuple(receptacles), object_classes)

