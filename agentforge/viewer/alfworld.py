"""An ALFWorld episode's route as a graph of the locations it visited (as in the TJPO paper's figure): where a
trajectory went, in what order, and which of the room's locations it never looked at.

The room's locations come from the first observation ("Looking quickly around you, you see a cabinet 4, ...");
the route from the accepted `go to X` steps (the env's `info["location"]`, else a `go to` action that was carried
out). Drawn as an inline SVG: the room's locations on an ellipse, the start in the middle, numbered arrows in the
order they were walked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from markupsafe import Markup, escape

from agentforge.viewer.drawings import EnvDrawing

ROOM = re.compile(r"you see (.+?)\.\s*(?:\n|$|Your task)", re.IGNORECASE | re.DOTALL)
WIDTH, HEIGHT = 760, 380
RADIUS_X, RADIUS_Y = 230, 140


def room_locations(first_observation: str) -> list[str]:
    """`... you see a cabinet 2, a cabinet 1, and a toaster 1.` -> ['cabinet 2', 'cabinet 1', 'toaster 1']."""
    match = ROOM.search(first_observation)
    if not match:
        return []
    items = re.split(r",\s*(?:and\s+)?|\s+and\s+", match.group(1))
    names = [re.sub(r"^(?:a|an|the)\s+", "", item.strip()) for item in items]
    return [name for name in names if name and re.search(r"\d$", name)]


def route(turns: Sequence[dict[str, Any]]) -> list[tuple[int, str]]:
    """(turn number, location reached) for every accepted `go to`."""
    steps = []
    for number, turn in enumerate(turns, start=1):
        info = turn.get("info") or {}
        if "location" in info:
            location = info.get("location")
        else:
            action = (turn.get("action") or "").strip().lower()
            location = action[len("go to "):] if action.startswith("go to ") and info.get("executed") else None
        if location:
            steps.append((number, str(location)))
    return steps


def _sort_key(name: str) -> tuple[str, int]:
    head, _, tail = name.rpartition(" ")
    return (head, int(tail)) if tail.isdigit() else (name, 0)


def route_svg(turns: Sequence[dict[str, Any]], first_observation: str, uid: str = "route") -> Markup | None:
    """The route graph, or None when there is nothing to draw (no room listing and no `go to`). `uid` keeps the
    arrow marker's id unique in a page with many graphs."""
    steps = route(turns)
    room = room_locations(first_observation)
    nodes = sorted(set(room) | {location for _, location in steps}, key=_sort_key)
    if not nodes:
        return None
    cx, cy = WIDTH / 2, HEIGHT / 2
    position = {}
    for i, name in enumerate(nodes):
        angle = 2 * math.pi * i / len(nodes) - math.pi / 2
        position[name] = (cx + RADIUS_X * math.cos(angle), cy + RADIUS_Y * math.sin(angle))
    position["start"] = (cx, cy)
    visited = {location for _, location in steps}
    first_visit = {}
    for order, (_, location) in enumerate(steps, start=1):
        first_visit.setdefault(location, order)

    parts = [f'<svg class="alfworld-route" role="img" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} '
             f'{HEIGHT}" data-steps="{len(steps)}" data-locations="{len(nodes)}">',
             "<title>route through the room: numbered arrows in the order the locations were reached</title>",
             f'<defs><marker id="arrow-{uid}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#2f6fde"/></marker></defs>']
    previous = "start"
    for order, (number, location) in enumerate(steps, start=1):
        parts.append(_edge(position[previous], position[location], order, number, location, uid))
        previous = location
    for name in nodes:
        x, y = position[name]
        on_route = name in visited
        fill = "#2f6fde" if on_route else "#ffffff"
        stroke = "#2f6fde" if on_route else "#b9b4aa"
        radius = 7 if on_route else 4
        label_x = cx + (RADIUS_X + 16) * (x - cx) / RADIUS_X
        label_y = cy + (RADIUS_Y + 14) * (y - cy) / RADIUS_Y + 3
        anchor = "middle" if abs(x - cx) < 30 else ("start" if x > cx else "end")
        weight = "600" if on_route else "400"
        colour = "#1d2b44" if on_route else "#8a857c"
        title = f"{name}: first reached in move {first_visit[name]}" if on_route else f"{name}: never visited"
        parts.append(f'<g class="location{" visited" if on_route else ""}" data-name="{escape(name)}">'
                     f"<title>{escape(title)}</title>"
                     f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius}" fill="{fill}" stroke="{stroke}" '
                     'stroke-width="1.5"/>'
                     f'<text x="{label_x:.1f}" y="{label_y:.1f}" text-anchor="{anchor}" font-size="11" '
                     f'font-weight="{weight}" fill="{colour}">{escape(name)}</text></g>')
    parts.append(f'<g class="start"><circle cx="{cx}" cy="{cy}" r="9" fill="#1d2b44"/>'
                 f'<text x="{cx}" y="{cy + 24}" text-anchor="middle" font-size="11" fill="#1d2b44">start</text></g>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _edge(a: tuple[float, float], b: tuple[float, float], order: int, number: int, location: str, uid: str) -> str:
    """A curved, numbered arrow from a to b (curved so that a walk back and forth shows two arrows)."""
    (x1, y1), (x2, y2) = a, b
    dx, dy = x2 - x1, y2 - y1
    length = math.hypot(dx, dy) or 1.0
    shrink = 10 / length  # stop short of the node's circle
    x1s, y1s, x2s, y2s = x1 + dx * shrink, y1 + dy * shrink, x2 - dx * shrink, y2 - dy * shrink
    bend = 0.12 * length
    mx, my = (x1 + x2) / 2 - dy / length * bend, (y1 + y2) / 2 + dx / length * bend
    label_x, label_y = (x1s + 2 * mx + x2s) / 4, (y1s + 2 * my + y2s) / 4
    return (f'<g class="move" data-order="{order}"><title>move {order} (turn {number}): go to {escape(location)}'
            f'</title><path d="M{x1s:.1f},{y1s:.1f} Q{mx:.1f},{my:.1f} {x2s:.1f},{y2s:.1f}" fill="none" '
            f'stroke="#2f6fde" stroke-width="1.6" stroke-opacity="0.8" marker-end="url(#arrow-{uid})"/>'
            f'<circle cx="{label_x:.1f}" cy="{label_y:.1f}" r="8" fill="#ffffff" stroke="#2f6fde" stroke-width="1"/>'
            f'<text x="{label_x:.1f}" y="{label_y + 3.5:.1f}" text-anchor="middle" font-size="9" '
            f'fill="#1d2b44">{order}</text></g>')


def _episode(record: dict[str, Any], uid: str) -> tuple[str, Markup] | None:
    turns = record["turns"]
    graph = route_svg(turns, str(turns[0].get("observation", "")), uid)
    return ("route: locations reached by `go to`, in order", graph) if graph is not None else None


DRAWING = EnvDrawing(family="alfworld", episode=_episode, drawing_first=True)
