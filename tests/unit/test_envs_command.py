"""`agentforge envs`: check takes names, the `agent` kind is not a failure, --help runs nothing."""

from __future__ import annotations

import pytest

import agentforge.commands.envs as envs_command
from agentforge.cli import main

pytestmark = pytest.mark.unit


def test_check_takes_names_and_skips_the_agent_kind(capsys):
    assert main(["envs", "check", "sokoban", "agent"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("sokoban: ok (") and "random steps" in out[0]
    assert out[1].startswith("agent: skipped (not an env to step") and len(out) == 2  # only the envs named


def test_unknown_names_exit_2_and_name_the_registered_envs(capsys):
    assert main(["envs", "check", "sokoban", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown env(s) nope; registered envs: agent, " in err and "sokoban" in err


def test_a_failing_env_exits_1_and_the_others_are_still_checked(monkeypatch, capsys):
    from agentforge.errors import AgentforgeError

    def broken(name, options=None):
        if name == "webshop":
            raise AgentforgeError("webshop needs its data: set env.data_dir")
        from agentforge.envs.base import ENVS

        return ENVS.get(name)(**(options or {}))

    monkeypatch.setattr("agentforge.envs.base.make_env", broken)
    assert main(["envs", "check", "webshop", "sokoban"]) == 1
    out = capsys.readouterr().out
    assert "webshop: unavailable: webshop needs its data" in out and "sokoban: ok" in out


@pytest.mark.parametrize("args", [["envs", "--help"], ["envs", "check", "--help"], ["envs", "list", "-h"],
                                  ["envs", "check", "sokoban", "--help"]])
def test_help_prints_usage_and_runs_no_check(monkeypatch, capsys, args):
    monkeypatch.setattr(envs_command, "check_env", lambda name: pytest.fail("--help ran a check"))
    assert main(args) == 0
    assert "agentforge envs check [NAME ...]" in capsys.readouterr().out


def test_list_and_the_new_commands_help(capsys):
    assert main(["envs", "list"]) == 0 and "sokoban" in capsys.readouterr().out.split()
    for command in ("export", "serve", "config"):
        assert main([command, "--help"]) == 0
        assert f"agentforge {command}" in capsys.readouterr().out
