"""`agentforge view <run dir>`: a run's trajectories as one static, self-contained HTML page.

`load` finds and reads what a train, eval or rollout run wrote; `sokoban`, `alfworld`, `webshop` and `descriptors`
draw what text alone shows badly; `render` puts it into a page; `command` is the CLI.
"""

from __future__ import annotations

from pathlib import Path

from agentforge.viewer.load import RunView, ViewerError, load_run

__all__ = ["RunView", "ViewerError", "load_run", "write_page"]


def write_page(run: Path, output: Path | None = None, iterations: set[int] | None = None,
               last: int | None = None) -> Path:
    """Write the page of `run` (a run dir or a trajectories file) to `output` (default: `<run dir>/trajectories.html`)
    and return its path."""
    from agentforge.viewer.render import render_page

    view = load_run(Path(run), iterations, last)
    folder = view.path if view.path.is_dir() else view.path.parent
    output = Path(output) if output else folder / "trajectories.html"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render_page(view), encoding="utf-8")
    return output
