"""One policy for closing a run's parts (the rollout stack, the trainer, a command's failed start): every part is
closed whatever the others do, and a part that fails to close never hides the error that stopped the run.

While an exception is on its way out, close failures are logged and the exception goes on. On a clean exit the
first close failure is raised once every part has closed (the others logged): a server port left open or a Ray
actor left running is an error worth seeing, not a warning in a log."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable

log = logging.getLogger("agentforge.closing")


def close_all(closers: Iterable[Callable[[], object]], during_error: bool | None = None) -> None:
    """Call every closer; `during_error`: whether an exception is already propagating (None: ask the interpreter,
    which knows inside an `except` or `finally` block)."""
    if during_error is None:
        during_error = sys.exc_info()[0] is not None
    errors: list[Exception] = []
    for close in closers:
        try:
            close()
        except Exception as error:
            errors.append(error)
    if not errors:
        return
    for error in errors if during_error else errors[1:]:
        log.warning("error while closing: %s: %s", type(error).__name__, error)
    if not during_error:
        raise errors[0]


def close_quietly(close: Callable[[], object]) -> None:
    """Close one part after a failed start: its failure is logged, the start's error goes on."""
    close_all([close], during_error=True)
