"""Ctrl-C that stops a run promptly, closes what it started, and leaves the last complete checkpoint usable.

Why a thread: Python runs a signal handler only when the main thread gets back to bytecode, and a learner step
spends tens of seconds inside one C++ call (a backward pass over a long micro-batch on a CPU), so a plain handler
answers Ctrl-C only when that call ends. Here SIGINT is blocked in the main thread (and so in the processes it
starts: Ray's runtime and workers are closed by the run, not killed half-way by the terminal's Ctrl-C) and a
watcher thread takes it with `sigwait`, which needs no help from the main thread:

1. the first signal prints at once that the run is stopping, then raises KeyboardInterrupt in the main thread as
   soon as it returns to Python (the current step — a rollout turn, a micro-batch's forward or backward — is
   abandoned, never half-applied: the optimizer only steps after every micro-batch); inside a `critical()` block
   (a checkpoint being written) the interrupt waits until the block ends, so a checkpoint is either complete or
   absent. The command's `finally` blocks then close the env workers, the engine, the learner and Ray;
2. a second signal stops at once: every child process is killed and the process exits with status 130.

A scheduler's stop (Slurm's `--signal=B:USR1@<secs>` warning before the time limit, forwarded by the batch script;
SIGTERM on preemption or `scancel`) is different: the run should *keep* its progress. SIGUSR1/SIGTERM only set a
flag (a plain Python handler: nothing needs to happen before the iteration ends); the trainer reads it between
iterations (`preemption_requested()`), writes a checkpoint and raises `Preempted`, and the process exits with
128 + the signal (138 for SIGUSR1, 143 for SIGTERM), which tells the batch script to requeue the job. A second such
signal stops like a first Ctrl-C (abandon the step, close everything; the last complete checkpoint resumes).
Ray's `ray.init` installs its own SIGTERM handler in the driver; `reclaim_signal_handlers()` puts ours back.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import TracebackType

SIGNALS = (signal.SIGINT,)
EXIT_STATUS = 130
PREEMPT_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


class Preempted(KeyboardInterrupt):
    """The run stopped for a scheduler's signal, after a checkpoint; `status` is the exit status (128 + signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"{signal.Signals(signum).name}: checkpoint written; exit status {128 + signum} so a Slurm "
                         "job can requeue and resume")
        self.signum = signum
        self.status = 128 + signum


class InterruptGuard:
    """Context manager: the stop protocol above while it is active (main thread only; a no-op elsewhere)."""

    def __init__(self, out: object = None) -> None:
        if out is None:
            from agentforge.tracking.capture import terminal_err

            out = terminal_err()  # the terminal, even while other software's output goes to the log
        self.out = out
        self.requested = threading.Event()
        self._critical = 0
        self._pending = False
        self._lock = threading.Lock()
        self._active = False
        self._watcher: threading.Thread | None = None
        self._previous_handler: object = signal.default_int_handler
        self._previous_preempt: dict[int, object] = {}
        self.preempt_signal: int | None = None

    # -------------------------------------------------------------------------------------------- lifecycle
    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
            return self
        # Python's own handler turns the watcher's interrupt_main() into KeyboardInterrupt; a process started in the
        # background by a shell inherits SIGINT ignored, which would make interrupt_main() a no-op
        self._previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
        self._previous_preempt = {signum: signal.signal(signum, self._on_preempt) for signum in PREEMPT_SIGNALS}
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        self._active = True
        self._watcher = threading.Thread(target=self._watch, name="agentforge-interrupt", daemon=True)
        self._watcher.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if not self._active:
            return
        self._active = False
        # wake the watcher so it ends (a signal sent to that thread alone, taken by its sigwait)
        signal.pthread_kill(self._watcher.ident, signal.SIGINT)  # type: ignore[union-attr]
        self._watcher.join(timeout=5)  # type: ignore[union-attr]
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        signal.signal(signal.SIGINT, self._previous_handler)
        for signum, handler in self._previous_preempt.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

    def reclaim(self) -> None:
        """Put the preemption handlers back after a library (Ray's `ray.init`) replaced them."""
        if self._active:
            for signum in PREEMPT_SIGNALS:
                signal.signal(signum, self._on_preempt)

    def _on_preempt(self, signum: int, frame: object) -> None:
        """SIGUSR1/SIGTERM (main thread, between bytecodes): ask for a checkpoint at the end of the iteration; a
        second one stops now, like Ctrl-C."""
        name = signal.Signals(signum).name
        if self.preempt_signal is None and not self.requested.is_set():
            self.preempt_signal = signum
            self._say(f"{name}: the scheduler asks the run to stop: checkpoint after the current iteration, then "
                      f"exit with status {128 + signum} (a second {name} stops at once)")
            return
        self.requested.set()
        self._say(f"{name} again: stopping now, abandoning the current step; the last complete checkpoint resumes")
        if self._critical > 0:  # a checkpoint being written finishes first (read without the lock: we may hold it)
            self._pending = True
            return
        raise KeyboardInterrupt

    # ------------------------------------------------------------------------------------------- protocol
    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        """Work that must not be cut in the middle (writing a checkpoint): a first Ctrl-C waits for its end."""
        with self._lock:
            self._critical += 1
        try:
            yield
        finally:
            with self._lock:
                self._critical -= 1
                fire = self._critical == 0 and self._pending
                self._pending = False
            if fire:
                raise KeyboardInterrupt

    def _watch(self) -> None:
        while True:
            signum = signal.sigwait(SIGNALS)
            if not self._active:
                return
            if self.requested.is_set():
                self._say(f"{signal.Signals(signum).name} again: stopping now")
                kill_children()
                os._exit(EXIT_STATUS)
            self.requested.set()
            with self._lock:
                deferred = self._critical > 0
                self._pending = deferred
            what = "after the checkpoint being written" if deferred else "abandoning the current step"
            self._say(f"{signal.Signals(signum).name}: stopping {what}; closing env workers, engine and Ray "
                      "(press Ctrl-C again to stop at once)")
            if not deferred:
                _thread.interrupt_main()

    def _say(self, message: str) -> None:
        with contextlib.suppress(Exception):
            print(f"agentforge: {message}", file=self.out, flush=True)


def kill_children() -> None:
    """Kill every process this one started (Ray's runtime and workers, engine processes), deepest first."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a core dependency
        return
    children = psutil.Process().children(recursive=True)
    for child in reversed(children):
        with contextlib.suppress(psutil.Error):
            child.kill()


_current: InterruptGuard | None = None


@contextlib.contextmanager
def interrupt_guard() -> Iterator[InterruptGuard]:
    """The process-wide guard around a command (nested uses share the outer one)."""
    global _current
    if _current is not None:
        yield _current
        return
    with InterruptGuard() as guard:
        _current = guard
        try:
            yield guard
        finally:
            _current = None


def preemption_requested() -> int | None:
    """The scheduler's signal (SIGUSR1, SIGTERM) the active guard received, if any: checkpoint, then `Preempted`."""
    return _current.preempt_signal if _current is not None else None


def reclaim_signal_handlers() -> None:
    """After `ray.init` (which installs its own SIGTERM handler in the driver): the guard's handlers again."""
    if _current is not None:
        _current.reclaim()


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """`InterruptGuard.critical` of the active guard; nothing when no guard is active (a library call)."""
    if _current is None:
        yield
        return
    with _current.critical():
        yield
