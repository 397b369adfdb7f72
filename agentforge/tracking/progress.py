"""Rich progress bars with rates for long work (rollouts, training iterations)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from agentforge.rollout.workflow import ProgressCallback, RolloutStats

console = Console(stderr=True)

_ROLLOUT_FIELDS = "{task.fields[turns]} turns · {task.fields[tok_s]:.0f} tok/s · {task.fields[env_s]:.0f} steps/s"


def _rollout_updater(progress: Progress, task: TaskID) -> ProgressCallback:
    def update(finished: int, total: int, stats: RolloutStats) -> None:
        progress.update(
            task,
            completed=finished,
            total=total,
            turns=stats.turns,
            tok_s=stats.generated_tokens / stats.generate_seconds if stats.generate_seconds else 0.0,
            env_s=stats.env_steps / stats.env_seconds if stats.env_seconds else 0.0,
        )

    return update


@contextmanager
def rollout_progress(description: str, total: int) -> Iterator[ProgressCallback]:
    """A bar over finished episodes that also shows turns, generated tokens/s and env steps/s."""
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("episodes · " + _ROLLOUT_FIELDS), TimeElapsedColumn(), console=console,
    )
    with progress:
        task = progress.add_task(description, total=total, turns=0, tok_s=0.0, env_s=0.0)
        yield _rollout_updater(progress, task)


class TrainProgress:
    """Two bars: iterations (with reward, success, loss, step time) and the current rollout's episodes."""

    def __init__(self, total_iterations: int, start: int) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console,
        )
        self.iterations = self.progress.add_task("train", total=total_iterations, completed=start, info="")
        self.rollout = self.progress.add_task("  rollout", total=1, info="", visible=False)

    def __enter__(self) -> TrainProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def rollout_callback(self, label: str) -> ProgressCallback:
        self.progress.reset(self.rollout, total=1, visible=True, description=f"  {label}", info="")

        def update(finished: int, total: int, stats: RolloutStats) -> None:
            tok_s = stats.generated_tokens / stats.generate_seconds if stats.generate_seconds else 0.0
            self.progress.update(self.rollout, completed=finished, total=total,
                                 info=f"episodes · {stats.turns} turns · {tok_s:.0f} tok/s")

        return update

    def iteration_done(self, iteration: int, metrics: dict[str, float]) -> None:
        info = (
            f"reward {metrics.get('train/mean_return', 0.0):+.2f}"
            f" · success {metrics.get('train/success_rate', 0.0):.2f}"
            f" · loss {metrics.get('train/loss', float('nan')):+.4f} · {metrics.get('time/iteration', 0.0):.1f} s/it"
        )
        self.progress.update(self.iterations, completed=iteration, info=info)
        self.progress.update(self.rollout, visible=False)
