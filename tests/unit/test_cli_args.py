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


@pytest.mark.parametrize("command", ["train", "eval", "rollout", "sft", "rft"])
def test_any_hf_model_folder_composes_for_every_command(command):
    """`model=hf model.path=<dir>` (the README's GPU line): hf's required `path: ???` is a key, not an unknown one."""
    from agentforge.commands.overrides import override_problems

    problems, cfg = override_problems([f"command={command}", "recipe=gigpo_sokoban", "model=hf",
                                       "model.path=/models/Qwen2.5-7B-Instruct"])
    assert problems == [] and cfg.model.path == "/models/Qwen2.5-7B-Instruct"
    problems, _ = override_problems([f"command={command}", "recipe=gigpo_sokoban", "model=hf"])
    assert problems == ["model.path: required; set model.path=<str | null>"]


def test_launch_slurm_dry_run_takes_an_hf_model_and_refuses_a_bad_override_without_a_traceback(capsys):
    assert main(["launch", "slurm", "recipe=debug", "model=hf", "model.path=/models/q", "--dry-run"]) == 0
    assert "model.path=/models/q" in capsys.readouterr().out
    assert main(["launch", "slurm", "recipe=debug", "learner.lr=[1", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentforge: config error") and "Traceback" not in err
    assert main(["launch", "slurm", "recipe=debug", "learner.lrr=1e-4", "--dry-run"]) == 2
    assert "learner.lrr: unknown key" in capsys.readouterr().err
