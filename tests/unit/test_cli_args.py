"""The command word of `agentforge <command>` is the run's `command=`; an override saying otherwise is refused."""

from __future__ import annotations

import pytest

from agentforge.cli import main

pytestmark = pytest.mark.unit


def test_a_contradicting_command_override_is_refused_before_anything_starts(capsys):
    assert main(["eval", "recipe=strata_sokoban", "command=train"]) == 2  # a config error
    err = capsys.readouterr().err
    assert "`command=train` contradicts the command `agentforge eval`" in err and "drop the override" in err
