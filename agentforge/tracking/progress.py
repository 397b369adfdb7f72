"""Progress for long work (rollouts, training iterations): rich bars with rates in a terminal, and plain lines when
the output goes to a file (CI, Slurm logs), where live bars show nothing until the end.

Rollout lines show turns played, env steps taken, turns/s and tokens/s over the phase's wall time, and an ETA
bounded by the turn budget (every unfinished episode may play up to `agent.max_turns`): `ETA ≤ 1:52:10` is the
most the phase can still take at the rate measured so far (episodes that end early make it shorter).

Either way a status line is guaranteed at least every `AGENTFORGE_PROGRESS_SECONDS` (default 30) while work runs:
a heartbeat thread repeats the current phase (rollout k/n episodes, learner update, warm start, ...) with its elapsed
time, so a long learner step on a slow CPU never looks like a hang.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentforge.types import ProgressCallback, RolloutStats

console = Console(stderr=True)
if not console.is_terminal:  # a log file: lines as wide as a table needs, not a terminal's default 80 columns
    console = Console(stderr=True, width=140)


def heartbeat_seconds() -> float:
    return float(os.environ.get("AGENTFORGE_PROGRESS_SECONDS", "30"))


def live_bars() -> bool:
    """Rich live bars only on a terminal (`AGENTFORGE_PROGRESS=lines` forces lines, `bars` forces bars)."""
    mode = os.environ.get("AGENTFORGE_PROGRESS", "auto")
    return mode == "bars" or (mode == "auto" and console.is_terminal)


def _rate(value: float) -> str:
    """A rate with the digits it needs: 0.35, 2.4, 180 (a slow phase must not read as 0)."""
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def remaining_turns(finished: int, total: int, turns: int, max_turns: int) -> int:
    """The most turns a rollout of `total` episodes can still play: each unfinished episode up to `max_turns`,
    less what unfinished episodes already played (at least `turns` minus the finished ones' at most max_turns)."""
    unfinished = max(0, total - finished)
    played_by_unfinished = max(0, turns - finished * max_turns)
    return max(0, unfinished * max_turns - played_by_unfinished)


def rollout_rates(stats: RolloutStats, elapsed: float | None = None, finished: int = 0, total: int = 0,
                  max_turns: int | None = None) -> str:
    """`N turns · M env steps · x turns/s · y tok/s · ETA ≤ h:mm:ss`; rates over `elapsed` wall seconds (the
    phase's), env steps as a count (a phase whose turns hold no valid action takes none: no misleading 0 steps/s)."""
    tok_s = stats.generated_tokens / stats.generate_seconds if stats.generate_seconds else 0.0
    parts = [f"{stats.turns} turns", f"{stats.env_steps} env steps"]
    if elapsed and elapsed > 0 and stats.turns:
        turn_s = stats.turns / elapsed
        parts.append(f"{_rate(turn_s)} turns/s")
    parts.append(f"{tok_s:.0f} tok/s")
    if elapsed and elapsed > 0 and stats.turns and max_turns and total and finished < total:
        left = remaining_turns(finished, total, stats.turns, max_turns)
        parts.append(f"ETA ≤ {_clock(left / (stats.turns / elapsed))}")
    return " · ".join(parts)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    if minutes >= 60:
        hours, minutes = divmod(minutes, 60)
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


class Heartbeat:
    """Prints `[label] status · elapsed` whenever nothing was printed for `interval` seconds (lines mode), so a log
    file shows the run is alive; the status is whatever the work set last."""

    def __init__(self, label: str, interval: float | None = None, enabled: bool = True) -> None:
        self.label = label
        self.interval = heartbeat_seconds() if interval is None else interval
        self.enabled = enabled and self.interval > 0
        self.status: str | Callable[[], str] = "starting"
        self.started = time.monotonic()
        self._last = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        self._last = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._beat, name="agentforge-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def set(self, status: str | Callable[[], str], announce: bool = False) -> None:
        """New status; a callable is evaluated at every line (a rollout's live counters and rates, so a beat between
        two progress callbacks is current); `announce` prints it now (a phase change worth a line of its own)."""
        self.status = status
        if announce:
            self.line()

    def text(self) -> str:
        return self.status() if callable(self.status) else self.status

    def line(self) -> None:
        if self.enabled:
            self._last = time.monotonic()
            console.print(f"[{self.label}] {self.text()} · {_clock(self._last - self.started)} elapsed",
                          highlight=False, markup=False, soft_wrap=True)

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.interval)):
            if time.monotonic() - self._last >= self.interval:
                self.line()


@contextmanager
def rollout_progress(description: str, total: int, max_turns: int | None = None) -> Iterator[ProgressCallback]:
    """Finished episodes out of `total` with turns, env steps, rates and the turn budget's ETA (`max_turns` per
    episode): a bar in a terminal, a line every `AGENTFORGE_PROGRESS_SECONDS` in a file."""
    started = time.monotonic()
    if not live_bars():
        with Heartbeat(description) as beat:
            def update(finished: int, total_: int, stats: RolloutStats) -> None:
                def status() -> str:  # stats is the workflow's live counter object
                    rates = rollout_rates(stats, time.monotonic() - started, finished, total_, max_turns)
                    return f"{finished}/{total_} episodes · {rates}"

                beat.set(status)

            beat.set(f"0/{total} episodes", announce=True)
            yield update
            beat.line()
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("episodes · {task.fields[info]}"), TimeElapsedColumn(), console=console,
    )
    with progress:
        task = progress.add_task(description, total=total, info="")

        def update_bar(finished: int, total_: int, stats: RolloutStats) -> None:
            info = rollout_rates(stats, time.monotonic() - started, finished, total_, max_turns)
            progress.update(task, completed=finished, total=total_, info=info)

        yield update_bar


class TrainProgress:
    """Iterations (with reward, success, loss, step time) and the current phase: two rich bars in a terminal; in a
    file, a line per phase change and per iteration plus the heartbeat."""

    def __init__(self, total_iterations: int, start: int, max_turns: int | None = None) -> None:
        self.total, self.max_turns = total_iterations, max_turns
        self.done = start
        self._first, self._since = start, time.monotonic()  # for the ETA: this process's iterations, wall clock
        self.bars = live_bars()
        self.heartbeat = Heartbeat("train", enabled=not self.bars)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console, disable=not self.bars,
        )
        self.iterations = self.progress.add_task("train", total=total_iterations, completed=start, info="")
        self.rollout = self.progress.add_task("  rollout", total=1, info="", visible=False)

    def __enter__(self) -> TrainProgress:
        self.progress.__enter__()
        self.heartbeat.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.heartbeat.__exit__(*exc)
        self.progress.__exit__(*exc)

    def iterations_begin(self) -> None:
        """The ETA's clock starts here: after iteration 0's evals and warm start, which the iterations to come do not
        repeat (counted in, a 7-minute warm start made the ETA after the first 23-s iteration read 2:37:47)."""
        self._first, self._since = self.done, time.monotonic()

    def _where(self) -> str:
        return f"iteration {min(self.done + 1, self.total)}/{self.total}"

    def phase(self, name: str) -> None:
        """A phase of the current iteration that has no counter of its own (learner update, weight sync, ...)."""
        self.heartbeat.set(f"{self._where()} · {name}", announce=True)
        if self.bars:
            self.progress.reset(self.rollout, total=1, visible=True, description=f"  {name}", info="")

    def rollout_callback(self, label: str) -> ProgressCallback:
        self.heartbeat.set(f"{self._where()} · {label} started", announce=True)
        if self.bars:
            self.progress.reset(self.rollout, total=1, visible=True, description=f"  {label}", info="")

        started = time.monotonic()

        def update(finished: int, total: int, stats: RolloutStats) -> None:
            where = self._where()

            def status() -> str:  # stats is the workflow's live counter object
                rates = rollout_rates(stats, time.monotonic() - started, finished, total, self.max_turns)
                return f"{where} · {label} {finished}/{total} episodes · {rates}"

            self.heartbeat.set(status)
            if self.bars:
                rates = rollout_rates(stats, time.monotonic() - started, finished, total, self.max_turns)
                self.progress.update(self.rollout, completed=finished, total=total, info=f"episodes · {rates}")

        return update

    def iteration_done(self, iteration: int, metrics: dict[str, float]) -> None:
        self.done = iteration
        info = (
            f"reward {metrics.get('train/mean_return', 0.0):+.2f}"
            f" · success {metrics.get('train/success_rate', 0.0):.2f}"
            f" · loss {metrics.get('train/loss', float('nan')):+.4f} · {metrics.get('time/iteration', 0.0):.1f} s/it"
        )
        if iteration > self._first and iteration < self.total:  # wall time per iteration so far (eval, checkpoints)
            per = (time.monotonic() - self._since) / (iteration - self._first)
            info += f" · ETA {_clock(per * (self.total - iteration))}"
        self.heartbeat.set(f"iteration {iteration}/{self.total} done · {info}", announce=True)
        self.progress.update(self.iterations, completed=iteration, info=info)
        self.progress.update(self.rollout, visible=False)
