"""One closing policy for the rollout stack, the trainer and a failed start (reliability/closing.py): every part is
closed, a close failure never hides the error already on its way out, and on a clean exit it is raised."""

from __future__ import annotations

import logging

import pytest

from agentforge.reliability.closing import close_all, close_quietly


def closers(log: list[str]) -> list:
    def ok(name: str):
        return lambda: log.append(name)

    def broken(name: str):
        def close() -> None:
            log.append(name)
            raise RuntimeError(f"{name} would not close")
        return close

    return [ok("workflow"), broken("pool"), broken("engine"), ok("tracker")]


def test_on_a_clean_exit_every_part_closes_then_the_first_failure_is_raised(caplog):
    log: list[str] = []
    with caplog.at_level(logging.WARNING), pytest.raises(RuntimeError, match="pool would not close"):
        close_all(closers(log))
    assert log == ["workflow", "pool", "engine", "tracker"] and "engine would not close" in caplog.text


def test_while_an_error_is_on_its_way_out_close_failures_are_logged_and_the_error_goes_on(caplog):
    log: list[str] = []
    with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match="the real error"):
        try:
            raise ValueError("the real error")
        finally:
            close_all(closers(log))  # the interpreter knows an exception is propagating
    assert log == ["workflow", "pool", "engine", "tracker"]
    assert "pool would not close" in caplog.text and "engine would not close" in caplog.text
    close_quietly(closers([])[1])  # a failed start's cleanup never raises


def test_the_rollout_stack_closes_by_the_same_policy():
    from agentforge.rollout.stack import RolloutStack

    log: list[str] = []
    parts = closers(log)

    class Part:
        def __init__(self, close) -> None:
            self.close = close

    stack = RolloutStack(engine=Part(parts[2]), pool=Part(parts[1]), ctx=None, algorithm=None,
                         workflows={"train": Part(parts[0])})
    with pytest.raises(KeyError), stack:
        raise KeyError("the command's own error")
    assert log == ["workflow", "pool", "engine"] and stack.closed
    stack.close()  # once only
    assert log == ["workflow", "pool", "engine"]
