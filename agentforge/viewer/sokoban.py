"""Sokoban rooms drawn from the observation text grid, so a reader sees the position the agent saw each turn.

The grid is read from the observation itself (the rows after the legend line), not from the env, so any run's
records can be drawn, including runs whose env options are unknown. The position after the last move is not in any
observation; it is replayed with the env's own push rules.
"""

from __future__ import annotations

import re
from typing import Any

from markupsafe import Markup, escape

from agentforge.viewer.drawings import EnvDrawing

SYMBOLS = frozenset("#_OX√PS")
CELL = 22
COLOURS = {"wall": "#3b3f46", "floor": "#f4efe6", "target": "#d9534f", "box": "#b07a3a", "done": "#3c9d5d",
           "player": "#2f6fde"}
NAMES = {"#": "wall", "_": "floor", "O": "target", "X": "box", "√": "box on target", "P": "player",
         "S": "player on target"}


def _unspaced(row: str) -> str:
    """A row of the `spaced` grid style (`# _ P`) as its cells (`#_P`)."""
    return row[::2] if len(row) > 1 and set(row[1::2]) == {" "} and set(row[::2]) <= SYMBOLS else row


def parse_grid(text: str) -> list[str] | None:
    """The grid rows of a Sokoban observation (the legend line skipped), or None when the text holds no grid."""
    rows = [_unspaced(line.strip()) for line in text.splitlines() if line.strip() and not line.startswith("Legend:")]
    rows = [row for row in rows if set(row) <= SYMBOLS]
    if not rows or len({len(row) for row in rows}) != 1:
        return None
    return rows


def grid_svg(rows: list[str], caption: str = "") -> Markup:
    """The room as an inline SVG: walls, floor, targets (red rings), boxes (brown; green when on a target) and the
    player (blue). Walls are one path and the floor one rectangle: a run has thousands of these drawings, so each
    stays under a kilobyte."""
    height, width = len(rows), len(rows[0])
    walls: list[str] = []
    marks: list[str] = []
    half = CELL / 2
    for r, row in enumerate(rows):
        for run in re.finditer("#+", row):  # a row's wall run is one rectangle
            length = (run.end() - run.start()) * CELL
            walls.append(f"M{run.start() * CELL} {r * CELL}h{length}v{CELL}h-{length}z")
        for c, ch in enumerate(row):
            x, y = c * CELL, r * CELL
            if ch in "OS√":
                marks.append(f'<circle class="target" cx="{x + half}" cy="{y + half}" r="7" fill="none" '
                             f'stroke="{COLOURS["target"]}" stroke-width="2"/>')
            if ch in "X√":
                colour = COLOURS["done"] if ch == "√" else COLOURS["box"]
                marks.append(f'<rect class="box" x="{x + 4}" y="{y + 4}" width="{CELL - 8}" height="{CELL - 8}" rx="2" '
                             f'fill="{colour}"/>')
            if ch in "PS":
                marks.append(f'<circle class="player" cx="{x + half}" cy="{y + half}" r="6" '
                             f'fill="{COLOURS["player"]}"/>')
    grid = escape("/".join(rows))
    return Markup(
        f'<svg class="sokoban-grid" role="img" width="{width * CELL}" height="{height * CELL}" viewBox="0 0 '
        f'{width * CELL} {height * CELL}" data-rows="{height}" data-cols="{width}" data-grid="{grid}">'
        f"<title>{escape(caption or 'Sokoban room')}</title>"
        f'<rect width="{width * CELL}" height="{height * CELL}" fill="{COLOURS["floor"]}"/>'
        f'<path class="walls" d="{"".join(walls)}" fill="{COLOURS["wall"]}" stroke="#2a2d33" stroke-width="0.5"/>'
        f'{"".join(marks)}</svg>')


def after_last_move(observation: str, action: str | None, executed: bool) -> list[str] | None:
    """The grid after the last turn's move (no later observation shows it), replayed with the env's push rules;
    the grid as it was when the move was not sent to the env, None when the grid cannot be read."""
    rows = parse_grid(observation)
    if rows is None or not executed or not action:
        return rows
    from agentforge.envs.sokoban import MOVES, apply_action, render_grid
    from agentforge.envs.sokoban import parse_grid as parse_state

    move = action.strip().lower()
    if move not in MOVES:
        return rows
    try:
        state = parse_state("\n".join(rows))
    except ValueError:  # a grid the env would not have produced (e.g. hand-edited records): leave it as it was
        return rows
    return render_grid(apply_action(state, move).state).splitlines()


def legend() -> Markup:
    """A one-line key to the drawing's symbols."""
    items = [("wall", COLOURS["wall"], "square"), ("box", COLOURS["box"], "square"),
             ("box on target", COLOURS["done"], "square"), ("target", COLOURS["target"], "ring"),
             ("player", COLOURS["player"], "dot")]
    out = []
    for name, colour, shape in items:
        style = {"square": f"background:{colour}", "ring": f"border:2px solid {colour};border-radius:50%",
                 "dot": f"background:{colour};border-radius:50%"}[shape]
        out.append(f'<span class="key"><i style="{style}"></i>{escape(name)}</span>')
    return Markup("".join(out))


def _turn(turn: dict[str, Any]) -> Markup | None:
    rows = parse_grid(str(turn.get("observation", "")))
    return grid_svg(rows, "the room this turn") if rows else None


def _episode(record: dict[str, Any], uid: str) -> tuple[str, Markup] | None:
    last = record["turns"][-1]
    executed = bool((last.get("info") or {}).get("executed"))
    rows = after_last_move(str(last.get("observation", "")), last.get("action"), executed)
    if not rows:
        return None
    caption = "final position (solved)" if record.get("won") else "final position"
    return caption, grid_svg(rows, caption)


def _room(record: dict[str, Any]) -> list[str] | None:
    """The first grid of the episode (the spatial_coverage descriptor's map)."""
    return parse_grid(str(record["turns"][0].get("observation", "")))


DRAWING = EnvDrawing(family="sokoban", turn=_turn, episode=_episode, room=_room, legend=legend)
