"""The command word of `agentforge <command>` is the run's `command=`; an override saying otherwise is refused."""

from __future__ import annotations

import pytest

from agentforge.cli import main

pytestmark = pytest.mark.unit


def test_a_contradicting_command_override_is_refused_before_anything_starts(capsys):
    assert main(["eval", "recipe=strata_sokoban", "command=train"]) == 2  # a config error
    err = capsys.readouterr().err
    assert "`command=train` contradicts the command `agentforge eval`" in err and "drop the override" in err


def test_eval_takes_split_as_a_short_key():
    from agentforge.cli import command_shorthands

    assert command_shorthands("eval", ["recipe=x", "split=test", "eval.num_tasks=4"]) == \
        ["recipe=x", "eval.split=test", "eval.num_tasks=4"]
    assert command_shorthands("train", ["split=test"]) == ["split=test"]  # train has no such key: refused as unknown


def test_an_unknown_eval_split_is_refused_with_the_valid_ones(capsys):
    assert main(["eval", "recipe=debug", "split=validation"]) == 2
    assert "eval.split" in capsys.readouterr().err
