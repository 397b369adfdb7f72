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
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import TracebackType

SIGNALS = (signal.SIGINT,)
EXIT_STATUS = 130


class InterruptGuard:
    """Context manager: the stop protocol above while it is active (main thread only; a no-op elsewhere)."""

    def __init__(self, out: object = None) -> None:
        self.out = out or sys.stderr
        self.requested = threading.Event()
        self._critical = 0
        self._pending = False
        self._lock = threading.Lock()
        self._active = False
        self._watcher: threading.Thread | None = None
        self._previous_handler: object = signal.default_int_handler

    # -------------------------------------------------------------------------------------------- lifecycle
    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
            return self
        # Python's own handler turns the watcher's interrupt_main() into KeyboardInterrupt; a process started in the
        # background by a shell inherits SIGINT ignored, which would make interrupt_main() a no-op
        self._previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
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


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """`InterruptGuard.critical` of the active guard; nothing when no guard is active (a library call)."""
    if _current is None:
        yield
        return
    with _current.critical():
        yield
