"""ALFWorld's trajectory descriptors (TJPO's diversity, the eval's cross-metrics), declared on the env's class
(`AlfworldEnv.descriptors`) and found through it by `agentforge.algorithms.descriptors`: counts, ℓ1-normalised there.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from agentforge.envs.base import acted_turns
from agentforge.types import Trajectory


def alfworld_action_type(trajectory: Trajectory) -> np.ndarray:
    """Counts of ALFWorld action verbs (go to, open, ..., look, inventory, other) over the actions taken."""
    from agentforge.envs.alfworld.env import ACTION_TYPES, action_type

    index = {kind: i for i, kind in enumerate(ACTION_TYPES)}
    counts = np.zeros(len(ACTION_TYPES))
    for turn in acted_turns(trajectory):
        counts[index[turn.info.get("action_type") or action_type(turn.action)]] += 1
    return counts


@cache
def alfworld_location_categories() -> tuple[str, ...]:
    """Receptacle categories as the engine names them (`countertop`, `sinkbasin`, ...), then `other`."""
    from agentforge.envs.alfworld.vocabulary import RTYPES

    return (*sorted({rtype.lower() for rtype in RTYPES}), "other")


def alfworld_location(trajectory: Trajectory) -> np.ndarray:
    """Counts of receptacle categories reached by an accepted `go to X` (`countertop 2` counts as countertop)."""
    categories = alfworld_location_categories()
    index = {name: i for i, name in enumerate(categories)}
    counts = np.zeros(len(categories))
    for turn in trajectory.turns:
        category = turn.info.get("location_category")
        if category:
            counts[index.get(category, len(categories) - 1)] += 1
    return counts
