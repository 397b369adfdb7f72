"""Shortest-solution Sokoban solver: the expert that writes SFT trajectories and checks rooms are solvable.

Breadth-first search over (player cell, box cells) with the env's push rules, so the first solution found has
the fewest actions (and, with gym-sokoban's −0.1 per step, the highest return). Cells are flat indices into a
wall-padded grid, which keeps the inner loop to integer arithmetic; boxes pushed onto dead cells (from which no
push sequence can reach a target) are pruned.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from agentforge.envs.sokoban import ACTIONS, MOVES, SokobanEnv, SokobanState
from agentforge.types import Task

DEFAULT_MAX_NODES = 200_000


class _Board:
    """The room as flat arrays over a grid padded with one ring of walls."""

    def __init__(self, state: SokobanState) -> None:
        room = state.room
        self.stride = room.width + 2
        size = (room.height + 2) * self.stride
        self.free = [False] * size
        for r in range(room.height):
            for c in range(room.width):
                if (r, c) not in room.walls:
                    self.free[self.index((r, c))] = True
        self.targets = frozenset(self.index(t) for t in room.targets)
        self.deltas = [MOVES[a][0] * self.stride + MOVES[a][1] for a in ACTIONS]
        self.live = self._live_cells()

    def index(self, pos: tuple[int, int]) -> int:
        return (pos[0] + 1) * self.stride + pos[1] + 1

    def _live_cells(self) -> list[bool]:
        """Cells from which a lone box can still be pushed onto some target (reverse pulls from the targets)."""
        live = [False] * len(self.free)
        queue = deque(self.targets)
        for t in self.targets:
            live[t] = True
        while queue:
            cell = queue.popleft()
            for d in self.deltas:
                box_from, player_from = cell - d, cell - 2 * d
                if self.free[box_from] and self.free[player_from] and not live[box_from]:
                    live[box_from] = True
                    queue.append(box_from)
        return live


def solve(source: SokobanEnv | SokobanState, max_nodes: int = DEFAULT_MAX_NODES) -> list[str] | None:
    """The shortest action list that solves the room from the current state; None if none within `max_nodes`."""
    state = source.state if isinstance(source, SokobanEnv) else source
    board = _Board(state)
    free, live, targets, deltas = board.free, board.live, board.targets, board.deltas
    start = (board.index(state.player), tuple(sorted(board.index(b) for b in state.boxes)))
    if all(b in targets for b in start[1]):
        return []
    parent: dict[tuple[int, tuple[int, ...]], tuple[Any, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        player, boxes = node
        for action_index, d in enumerate(deltas):
            ahead = player + d
            if ahead in boxes:
                behind = ahead + d
                if not free[behind] or not live[behind] or behind in boxes:
                    continue
                new_boxes = tuple(sorted(behind if b == ahead else b for b in boxes))
                child = (ahead, new_boxes)
                if child in parent:
                    continue
                parent[child] = (node, action_index)
                if all(b in targets for b in new_boxes):
                    return _path(parent, child)
            else:
                if not free[ahead]:
                    continue
                child = (ahead, boxes)
                if child in parent:
                    continue
                parent[child] = (node, action_index)
            if len(parent) >= max_nodes:
                return None
            queue.append(child)
    return None


def _path(parent: dict[Any, tuple[Any, int] | None], node: Any) -> list[str]:
    actions = []
    link = parent[node]
    while link is not None:
        node, action_index = link
        actions.append(ACTIONS[action_index])
        link = parent[node]
    return actions[::-1]


def expert_actions(
    task: Task, env_options: dict[str, Any] | None = None, max_nodes: int = DEFAULT_MAX_NODES
) -> list[str] | None:
    """The expert's (shortest) actions from the initial state of `task`'s room; None if not found in budget.

    The solution may be longer than the env's `max_steps`; callers producing SFT data should check.
    """
    env = SokobanEnv(**(env_options or {}))
    try:
        env.reset(task)
        return solve(env, max_nodes=max_nodes)
    finally:
        env.close()
