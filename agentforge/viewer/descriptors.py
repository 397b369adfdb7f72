"""TJPO's per-trajectory descriptor drawn by what it counts: Sokoban's move transitions as a 4×4 table, the cells
the player stood on as a heat map over the room, ALFWorld's location and action-type counts as labelled bars.

The descriptor is what TJPO makes diverse within a group, so seeing it next to the trajectory's credit tells a reader
why one rollout was credited over another. A descriptor the viewer does not know is drawn as bars by index.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

MOVES = ("up", "down", "left", "right")


def labels(name: str, size: int) -> list[str]:
    """Entry names of a built-in descriptor (its source defines the order); indices for anything else."""
    try:
        if name == "location":
            from agentforge.envs.alfworld.descriptors import alfworld_location_categories

            names = list(alfworld_location_categories())
        elif name == "action_type":
            from agentforge.envs.alfworld.env import ACTION_TYPES

            names = list(ACTION_TYPES)
        else:
            names = []
    except ImportError:  # an env package that is not installed: fall back to indices
        names = []
    return names if len(names) == size else [str(i) for i in range(size)]


def _shade(value: float, top: float) -> str:
    alpha = 0.0 if top <= 0 else 0.12 + 0.88 * value / top
    return f"rgba(47,111,222,{alpha:.2f})"


def transition_table(vector: Sequence[float]) -> Markup:
    """direction_transition: row = previous move, column = next move."""
    top = max(vector) if vector else 0.0
    head = "".join(f"<th>{m}</th>" for m in MOVES)
    rows = []
    for i, previous in enumerate(MOVES):
        cells = "".join(f'<td style="background:{_shade(v, top)}" title="{previous} → {MOVES[j]}: {v:.3f}">'
                        f"{v:.2f}</td>" for j, v in enumerate(vector[4 * i: 4 * i + 4]))
        rows.append(f"<tr><th>{previous} →</th>{cells}</tr>")
    return Markup(f'<table class="descriptor-grid"><tr><th></th>{head}</tr>{"".join(rows)}</table>')


def coverage_map(vector: Sequence[float], rows: list[str] | None) -> Markup | None:
    """spatial_coverage: the share of steps spent on each cell, over the room's walls (None if sizes differ)."""
    if not rows or len(rows) * len(rows[0]) != len(vector):
        return None
    top = max(vector) if vector else 0.0
    width = len(rows[0])
    out = ['<table class="descriptor-grid coverage">']
    for r, row in enumerate(rows):
        cells = []
        for c, symbol in enumerate(row):
            value = vector[r * width + c]
            colour = "#3b3f46" if symbol == "#" else _shade(value, top)
            cells.append(f'<td style="background:{colour}" title="cell ({r}, {c}): {value:.3f}"></td>')
        out.append(f"<tr>{''.join(cells)}</tr>")
    out.append("</table>")
    return Markup("".join(out))


def bars(vector: Sequence[float], names: list[str]) -> Markup:
    """Non-zero entries as horizontal bars (a 26-entry location vector is mostly zeros)."""
    top = max(vector) if vector else 0.0
    items = [(n, v) for n, v in zip(names, vector, strict=False) if v > 0]
    if not items:
        return Markup('<span class="muted">all zero (nothing counted)</span>')
    out = ['<div class="descriptor-bars">']
    for name, value in items:
        width = 100 * value / top if top > 0 else 0
        out.append(f'<div class="bar-row"><span class="bar-label">{escape(name)}</span><span class="bar">'
                   f'<i style="width:{width:.0f}%"></i></span><span class="bar-value">{value:.2f}</span></div>')
    out.append("</div>")
    return Markup("".join(out))


def descriptor_html(name: str, vector: Sequence[float], room: list[str] | None = None) -> Markup:
    """One descriptor vector, drawn for what it counts."""
    values = [float(v) for v in vector]
    if name == "direction_transition" and len(values) == 16:
        return transition_table(values)
    if name == "spatial_coverage":
        drawn = coverage_map(values, room)
        if drawn is not None:
            return drawn
    return bars(values, labels(name, len(values)))
