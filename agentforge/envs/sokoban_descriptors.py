"""Sokoban's trajectory descriptors (TJPO's diversity, the eval's cross-metrics), declared on the env's class
(`SokobanEnv.descriptors`) and found through it by `agentforge.algorithms.descriptors`: counts, ℓ1-normalised there.
"""

from __future__ import annotations

import numpy as np

from agentforge.envs.base import acted_turns
from agentforge.errors import AgentforgeError
from agentforge.types import Trajectory


def sokoban_direction_transition(trajectory: Trajectory) -> np.ndarray:
    """4×4 counts of consecutive moves (previous → next) in the emitted action stream, flattened row-major."""
    from agentforge.envs.sokoban import ACTIONS

    index = {name: i for i, name in enumerate(ACTIONS)}
    moves = [index[a] for a in (t.action.strip().lower() for t in acted_turns(trajectory)) if a in index]
    counts = np.zeros((len(ACTIONS), len(ACTIONS)))
    for previous, following in zip(moves, moves[1:], strict=False):
        counts[previous, following] += 1
    return counts.ravel()


def sokoban_spatial_coverage(trajectory: Trajectory) -> np.ndarray:
    """Counts of the room cells the player stood on (the start cell and after every step), flattened row-major."""
    from agentforge.envs.sokoban import parse_grid

    if not trajectory.turns:
        raise AgentforgeError("descriptor 'spatial_coverage' needs at least one turn (the first anchor is the room)")
    start = parse_grid(str(trajectory.turns[0].anchor))
    height, width = start.room.height, start.room.width
    counts = np.zeros((height, width))
    counts[start.player] += 1
    for turn in trajectory.turns:
        position = turn.info.get("player_pos")
        if position is not None:
            row, col = (int(v) for v in position)
            counts[row, col] += 1
    return counts.ravel()
