"""An external agent's trajectory descriptor (env=agent: which tools its model called, in what order), declared on
`AgentEnv.descriptors` and found through it by `agentforge.algorithms.descriptors`.
"""

from __future__ import annotations

import numpy as np

from agentforge.types import Trajectory

TOOL_BUCKETS = 8  # tool names hash into this many buckets (a fixed dimension, whatever tools an agent has)


def agent_tool_calls(trajectory: Trajectory) -> np.ndarray:
    """Which tools an external agent's model called and in what order: counts of each tool (hashed into
    `TOOL_BUCKETS`) and of consecutive tool pairs (previous → next, hashed likewise), then the calls that named no
    tool. Two episodes that searched twice and answered describe alike; one that only answered differs."""
    import zlib

    def bucket(name: str) -> int:
        return zlib.crc32(name.encode()) % TOOL_BUCKETS

    unigrams, pairs = np.zeros(TOOL_BUCKETS), np.zeros(TOOL_BUCKETS)
    plain = 0.0
    names: list[str] = []
    for turn in trajectory.turns:
        called = [c["function"]["name"] for c in turn.info.get("tool_calls") or []]
        plain += 0.0 if called else 1.0
        names.extend(called)
    for name in names:
        unigrams[bucket(name)] += 1
    for previous, following in zip(names, names[1:], strict=False):
        pairs[bucket(f"{previous}->{following}")] += 1
    return np.concatenate([unigrams, pairs, [plain]])
