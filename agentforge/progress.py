"""Rich progress bars with rates for long work (rollouts, training iterations)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentforge.agent.loop import ProgressCallback, RolloutStats

console = Console(stderr=True)


@contextmanager
def rollout_progress(description: str, total: int) -> Iterator[ProgressCallback]:
    """A bar over finished episodes that also shows turns, generated tokens/s and env steps/s."""
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("episodes · {task.fields[turns]} turns · {task.fields[tok_s]:.0f} tok/s · {task.fields[env_s]:.0f} steps/s"),
        TimeElapsedColumn(),
        console=console,
    )
    with progress:
        task = progress.add_task(description, total=total, turns=0, tok_s=0.0, env_s=0.0)

        def update(finished: int, _total: int, stats: RolloutStats) -> None:
            progress.update(
                task,
                completed=finished,
                turns=stats.turns,
                tok_s=stats.generated_tokens / stats.generate_seconds if stats.generate_seconds else 0.0,
                env_s=stats.env_steps / stats.env_seconds if stats.env_seconds else 0.0,
            )

        yield update
