"""Which drawing goes with which env: each env names its own on its class (`drawing = "pkg.module:NAME"`, found by
`envs.base.drawing_for`), an `EnvDrawing` of what the viewer can draw from saved records: a picture per turn, one
per episode, the room under a coverage descriptor, a legend. Envs without one show their observation text alone.
A path, not an import, so an env module does not load the viewer (nor the viewer every env's engine)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from markupsafe import Markup

Record = dict[str, Any]


def _nothing(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class EnvDrawing:
    """What an env's trajectories look like in `agentforge view`. `family` names it for the page (its legend);
    `drawing_first`: the episode's picture goes above the turns (a route), not below them (a final position)."""

    family: str
    turn: Callable[[Record], Markup | None] = _nothing  # what the agent saw this turn
    episode: Callable[[Record, str], tuple[str, Markup] | None] = _nothing  # (caption, picture) of the episode
    room: Callable[[Record], list[str] | None] = _nothing  # the grid under a spatial descriptor's map
    legend: Callable[[], Markup | None] = _nothing
    drawing_first: bool = False


NO_DRAWING = EnvDrawing(family="")


@cache
def drawing_for_env(env: str | None) -> EnvDrawing:
    """The env's drawing (NO_DRAWING for an env without one, or a name no registered env has: a record from a
    plugin env that is not installed here)."""
    import agentforge.envs  # noqa: F401  (registers the built-in envs)
    from agentforge.envs.base import ENVS, drawing_for

    if not env or env not in ENVS:
        return NO_DRAWING
    return drawing_for(env) or NO_DRAWING


def family(env: str | None) -> str:
    return drawing_for_env(env).family


def turn_drawing(env: str | None, turn: Record) -> Markup | None:
    return drawing_for_env(env).turn(turn)


def trajectory_drawing(env: str | None, record: Record, uid: str) -> tuple[str, Markup] | None:
    if not record.get("turns"):
        return None
    return drawing_for_env(env).episode(record, uid)


def room_rows(env: str | None, record: Record) -> list[str] | None:
    if not record.get("turns"):
        return None
    return drawing_for_env(env).room(record)


def legend(env: str | None) -> Markup | None:
    return drawing_for_env(env).legend()
