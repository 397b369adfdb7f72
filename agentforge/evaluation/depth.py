"""Success by how long a plan the task needs: held-out success split by the length of the env expert's solution
(for Sokoban's BFS and FrozenLake's planner the optimal number of moves), so a gain on one-move rooms cannot pass
for learning to plan. Every eval of the trainer and every row of `agentforge eval` reports it where the env has an
expert: `<split>/success_depth_<b>` with its Wilson interval (`_lo`, `_hi`) and `<split>/episodes_depth_<b>`, for
the buckets 1, 2 and 3+ moves."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from agentforge.stats import wilson_interval
from agentforge.types import Group, Task

BUCKETS = ("1", "2", "3+")
log = logging.getLogger("agentforge.depth")
TaskDepth = Callable[[Task], "int | None"]


def bucket(depth: int) -> str:
    return str(depth) if depth < 3 else "3+"


def success_by_depth(groups: Sequence[Group], depth_of: TaskDepth) -> dict[str, float]:
    """Success rate per solution-length bucket over the played episodes (evolved samples left out); tasks the expert
    cannot solve are counted in `episodes_depth_none`."""
    wins = {b: 0 for b in BUCKETS}
    played = {b: 0 for b in BUCKETS}
    unsolved = 0
    for group in groups:
        depth = depth_of(group.task)
        episodes = [t for t in group.trajectories if not t.meta.get("evolved")]
        if depth is None or depth < 1:
            unsolved += len(episodes)
            continue
        b = bucket(depth)
        played[b] += len(episodes)
        wins[b] += sum(bool(t.won) for t in episodes)
    out: dict[str, float] = {"episodes_depth_none": float(unsolved)}
    for b in BUCKETS:
        out[f"episodes_depth_{b}"] = float(played[b])
        if played[b]:
            lo, hi = wilson_interval(wins[b], played[b])
            out.update({f"success_depth_{b}": wins[b] / played[b], f"success_depth_{b}_lo": lo,
                        f"success_depth_{b}_hi": hi})
    return out


def expert_depth(expert: Callable[[Task, dict], list[str] | None], env_options: dict) -> TaskDepth:
    """A task's depth: the length of the expert's solution (None where it has none), computed once per task."""
    cache: dict[str, int | None] = {}

    def depth(task: Task) -> int | None:
        if task.key not in cache:
            try:
                actions = expert(task, {**env_options, **dict(task.options)})
            except Exception as error:  # a diagnostic must not stop an eval: the task goes to `episodes_depth_none`
                log.warning("the expert could not solve %s (%s); its episodes count as depth unknown",
                            task.describe(), error)
                actions = None
            cache[task.key] = len(actions) if actions else None
        return cache[task.key]

    return depth
