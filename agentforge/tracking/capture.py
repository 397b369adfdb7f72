"""A quiet first screen: other software's output goes to the run's log file, agentforge's own lines to the console.

Why file descriptors and not `sys.stdout`: what fills a first screen comes from everywhere — vLLM's FutureWarnings
and NUMA notice, DeepSpeed's gcc lines (a compiler subprocess), transformers' weight-loading bars, Ray's worker
lines, C++ libraries writing straight to fd 2. Pointing fds 1 and 2 at `<run dir>/console.log` catches all of it;
agentforge's console (progress, tables, its warnings and errors) keeps a duplicate of the terminal's descriptor.
With `verbose` (`-v`, `logger.verbose=true`) a thread copies the log to the terminal as well.

Warnings that matter stay visible: agentforge's own `warnings.warn` calls and its loggers' warnings (dtype choice,
memory, data problems, a skipped update) are shown on the console and written to the log.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

LOG_NAME = "console.log"
_terminal: tuple[TextIO, TextIO] | None = None  # (stdout, stderr) of the terminal while capturing


def terminal_out() -> TextIO:
    """Where agentforge's own stdout lines go: the terminal's stdout while capturing, else `sys.stdout`."""
    return _terminal[0] if _terminal else sys.stdout


def terminal_err() -> TextIO:
    """Where agentforge's own messages go: the terminal's stderr while capturing, else `sys.stderr`."""
    return _terminal[1] if _terminal else sys.stderr


def _is_ours(filename: str) -> bool:
    return f"{os.sep}agentforge{os.sep}" in str(filename)


class _OwnWarningsToTerminal(logging.Handler):
    """agentforge's log warnings on the console (the rest of logging goes where Hydra sends it: the log files)."""

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            terminal_err().write(f"agentforge: {record.levelname.lower()}: {record.getMessage()}\n")
            terminal_err().flush()


class _Tee(threading.Thread):
    """Copies what other software writes (a pipe on fds 1 and 2) into the log and onto the terminal."""

    def __init__(self, read_fd: int, log_fd: int, terminal_fd: int) -> None:
        super().__init__(name="agentforge-output-tee", daemon=True)
        self.read_fd, self.log_fd, self.terminal_fd = read_fd, log_fd, terminal_fd

    def run(self) -> None:
        while True:
            try:
                chunk = os.read(self.read_fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            for fd in (self.log_fd, self.terminal_fd):
                with contextlib.suppress(OSError):
                    os.write(fd, chunk)


def _text(fd: int) -> TextIO:
    return io.TextIOWrapper(os.fdopen(fd, "wb", buffering=0), encoding="utf-8", errors="replace",
                            line_buffering=True, write_through=True)


@contextlib.contextmanager
def output_to_log(run_dir: str | os.PathLike[str], verbose: bool = False, console: Any = None) -> Iterator[Path]:
    """While active: fds 1 and 2 write to `<run_dir>/console.log` (and to the terminal with `verbose`); the rich
    `console` given, `terminal_out()`/`terminal_err()`, agentforge's warnings and its logged warnings reach the
    terminal. Everything is restored on exit, before any traceback is printed."""
    global _terminal
    if _terminal is not None or os.environ.get("AGENTFORGE_CAPTURE", "1") == "0":
        yield Path(run_dir) / LOG_NAME
        return
    path = Path(run_dir) / LOG_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = os.dup(1), os.dup(2)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    tee: _Tee | None = None
    if verbose:
        read_fd, write_fd = os.pipe()
        tee = _Tee(read_fd, log_fd, saved[1])
        tee.start()
        target = write_fd
    else:
        target = log_fd
    os.dup2(target, 1)
    os.dup2(target, 2)
    if verbose:
        os.close(target)
    _terminal = (_text(os.dup(saved[0])), _text(os.dup(saved[1])))
    previous_file = getattr(console, "_file", None) if console is not None else None
    if console is not None:
        console.file = _terminal[1]
    previous_showwarning = warnings.showwarning

    def showwarning(message: Any, category: type, filename: str, lineno: int, file: Any = None,
                    line: str | None = None) -> None:
        previous_showwarning(message, category, filename, lineno, file, line)  # the log keeps every warning
        if _is_ours(filename) or category.__module__.startswith("agentforge"):
            terminal_err().write(f"agentforge: warning: {message}\n")

    warnings.showwarning = showwarning
    handler = _OwnWarningsToTerminal(level=logging.WARNING)
    own = logging.getLogger("agentforge")
    own.addHandler(handler)
    try:
        yield path
    finally:
        own.removeHandler(handler)
        warnings.showwarning = previous_showwarning
        if console is not None:
            console.file = previous_file
        for stream in (sys.stdout, sys.stderr, *_terminal):
            with contextlib.suppress(Exception):
                stream.flush()
        terminal = _terminal
        _terminal = None
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        if tee is not None:
            tee.join(timeout=2)  # fds 1 and 2 no longer hold the pipe: the thread sees its end
        for stream in terminal:
            with contextlib.suppress(Exception):
                stream.close()
        for fd in (*saved, log_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
