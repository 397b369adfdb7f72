"""Which env-specific drawing goes with which env: a Sokoban room per turn, a WebShop page per turn, an ALFWorld route
per trajectory. Envs without a drawing show their observation text alone."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from agentforge.viewer import alfworld, sokoban, webshop


def family(env: str | None) -> str:
    """`alfworld_intervention` draws like `alfworld`: the env name up to its first underscore-suffixed variant."""
    name = (env or "").lower()
    for known in ("sokoban", "alfworld", "webshop"):
        if name.startswith(known):
            return known
    return name


def turn_drawing(env: str | None, turn: dict[str, Any]) -> Markup | None:
    """The picture of what the agent saw this turn, or None."""
    kind, text = family(env), str(turn.get("observation", ""))
    if kind == "sokoban":
        rows = sokoban.parse_grid(text)
        return sokoban.grid_svg(rows, "the room this turn") if rows else None
    if kind == "webshop" and webshop.is_webshop_page(text):
        return webshop.page_html(text, turn.get("action"))
    return None


def trajectory_drawing(env: str | None, record: dict[str, Any], uid: str) -> tuple[str, Markup] | None:
    """(caption, picture) of the whole episode: ALFWorld's route graph, Sokoban's position after the last move."""
    kind, turns = family(env), record.get("turns") or []
    if not turns:
        return None
    if kind == "alfworld":
        graph = alfworld.route_svg(turns, str(turns[0].get("observation", "")), uid)
        return ("route: locations reached by `go to`, in order", graph) if graph is not None else None
    if kind == "sokoban":
        last = turns[-1]
        executed = bool((last.get("info") or {}).get("executed"))
        rows = sokoban.after_last_move(str(last.get("observation", "")), last.get("action"), executed)
        if rows:
            caption = "final position (solved)" if record.get("won") else "final position"
            return caption, sokoban.grid_svg(rows, caption)
    return None


def room_rows(env: str | None, record: dict[str, Any]) -> list[str] | None:
    """The first Sokoban grid of an episode (for the spatial_coverage descriptor's map)."""
    turns = record.get("turns") or []
    if family(env) != "sokoban" or not turns:
        return None
    return sokoban.parse_grid(str(turns[0].get("observation", "")))
