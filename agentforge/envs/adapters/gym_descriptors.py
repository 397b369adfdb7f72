"""The gym adapter's trajectory descriptor (TJPO's diversity, the eval's cross-metrics), declared on the adapter's
class (`GymEnv.descriptors`) and found through it by `agentforge.algorithms.descriptors`.
"""

from __future__ import annotations

import numpy as np

from agentforge.types import Trajectory

GYM_STATE_BUCKETS = 64  # discrete states fold into this many cells (FrozenLake 4x4: 16, 8x8: 64), fixed per run


def gym_state_coverage(trajectory: Trajectory) -> np.ndarray:
    """Counts of the discrete states visited (each turn's starting state and the last one reached), for envs whose
    observation is a state index (FrozenLake, CliffWalking, Taxi); other observations hash into the same cells."""
    counts = np.zeros(GYM_STATE_BUCKETS)
    states = [turn.anchor for turn in trajectory.turns]
    if trajectory.turns and "state" in trajectory.turns[-1].info:
        states.append(trajectory.turns[-1].info["state"])
    for state in states:
        text = str(state)
        index = int(text) if text.isdigit() else sum(text.encode())
        counts[index % GYM_STATE_BUCKETS] += 1
    return counts
