"""`agentforge launch slurm` without a Slurm: options, checks and the rendered script (bash -n checks its syntax).
The real runs are in tests/slurm/ (`make test-slurm`)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from agentforge.errors import ConfigError
from agentforge.launch.options import SlurmOptions, split_launch_args, time_limit_seconds
from agentforge.launch.slurm import check_slots, derived_overrides, render
from agentforge.schema.compose import compose_config

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 1800), ("30:15", 1815), ("2:00:00", 7200), ("1-00", 86400), ("1-02:03", 93780), ("1-02:03:04", 93784),
    ("UNLIMITED", 10**9), ("soon", None), ("1:2:3:4", None), ("x-01", None),
])
def test_slurm_time_formats(text: str, seconds: int | None) -> None:
    assert time_limit_seconds(text) == seconds


def test_launch_options_split_from_train_overrides() -> None:
    options, overrides, dry = split_launch_args(
        ["recipe=debug", "nodes=2", "cpus_per_node=4", "partition=cpu", "learner.lr=1e-4", "--dry-run"])
    assert (options.nodes, options.cpus_per_node, options.partition, dry) == (2, 4, "cpu", True)
    assert overrides == ["recipe=debug", "learner.lr=1e-4"]


@pytest.mark.parametrize(("args", "message"), [
    (["nodes=0"], "nodes=0 must be >= 1"),
    (["nodes=two"], "must be an integer"),
    (["time=soon"], "is not a Slurm time"),
    (["time=5", "signal_seconds=600"], "is not shorter than time=5"),
    (["--multirun"], "unknown flag '--multirun'"),
    (["image=ubuntu"], "neither an Apptainer image file"),
])
def test_bad_launch_options_name_the_fix(args: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        split_launch_args(args)


def test_more_learner_ranks_than_slots_is_refused() -> None:
    cfg = compose_config(["recipe=debug", "command=train", "learner.num_ranks=4", "learner.in_process=false"])
    with pytest.raises(ConfigError, match="needs 4 slots .* give 2; lower learner.num_ranks"):
        check_slots(cfg, SlurmOptions(nodes=2, cpus_per_node=1))
    check_slots(cfg, SlurmOptions(nodes=2, cpus_per_node=2))  # 4 slots: fine
    strict = compose_config(["recipe=debug", "command=train", "learner.num_ranks=4", "learner.in_process=false",
                             "learner.placement_strategy=STRICT_SPREAD"])
    with pytest.raises(ConfigError, match="STRICT_SPREAD puts one rank per node"):
        check_slots(strict, SlurmOptions(nodes=2, cpus_per_node=4))


def test_multi_node_defaults_spread_work_unless_the_user_chose() -> None:
    cfg = compose_config(["recipe=debug", "command=train", "learner.num_ranks=2", "learner.in_process=false"])
    extra = derived_overrides(cfg, SlurmOptions(nodes=2), ["learner.num_ranks=2"])
    assert "learner.placement_strategy=SPREAD" in extra and "learner.in_process=false" in extra
    assert any(o.startswith("++env_pool.actor_options=") and "SPREAD" in o for o in extra)
    mine = derived_overrides(cfg, SlurmOptions(nodes=2), ["learner.placement_strategy=PACK"])
    assert not any(o.startswith("learner.placement_strategy") for o in mine)
    assert derived_overrides(compose_config(["recipe=debug", "command=train"]), SlurmOptions(nodes=1), []) == []


def test_rendered_script_is_valid_bash_with_the_launch_in_it(tmp_path: Path) -> None:
    options = SlurmOptions(nodes=3, cpus_per_node=8, gpus_per_node=4, partition="gpu", account="proj", time="2:00:00",
                           constraint="a100", signal_seconds=240, image="/images/agentforge.sif")
    text = render(options, ["recipe=tjpo_alfworld", "algorithm.lambda=0.3", "note=it's"], tmp_path / "run",
                  tmp_path, engine_gpus=2)
    for line in ("#SBATCH --nodes=3", "#SBATCH --gpus-per-node=4", "#SBATCH --partition=gpu", "#SBATCH --account=proj",
                 "#SBATCH --time=2:00:00", "#SBATCH --constraint=a100", "#SBATCH --requeue",
                 "#SBATCH --signal=B:USR1@240", "export RAY_AUTH_MODE=token", "trap teardown EXIT",
                 "apptainer exec --nv", '"hydra.run.dir=$RUN_DIR" resume=auto', "ENGINE_GPUS=2",
                 "scontrol requeue"):
        assert line in text, line
    assert "'note=it'\"'\"'s'" in text  # overrides are shell-quoted
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


HOSTILE = ["$(touch PWNED_DOLLAR)", "`touch PWNED_TICK`", 'say "hi"; touch PWNED_SEMI', "a b  c"]


def test_hostile_override_values_are_logged_literally_and_never_run(tmp_path: Path) -> None:
    """Overrides reach the script only quoted: `bash -n` passes, and the rendered log line, run, prints them as
    written and executes nothing."""
    overrides = ["recipe=debug", *(f"logger.run_name={value}" for value in HOSTILE)]
    run_dir = tmp_path / "runs" / "job"
    text = render(SlurmOptions(), overrides, run_dir, tmp_path, bin_prefix="/opt/venv/bin/")
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    log_line = next(line for line in text.splitlines() if line.startswith("log ") and "trainer:" in line)
    shown = subprocess.run(["bash", "-c", 'log() { printf "%s\\n" "$*"; }; ' + log_line], cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    for value in HOSTILE:
        assert value in shown or shlex.quote(f"logger.run_name={value}") in shown
    assert f"hydra.run.dir={run_dir}" in shown
    assert not list(tmp_path.glob("PWNED*"))
    assert '"${BIN}agentforge" train' in text and '"${BIN}ray" start' in text


@pytest.mark.parametrize(("args", "message"), [
    (["partition=gpu\ntouch PWNED"], "holds a control character"),
    (["account=a b"], "holds a space"),
    (["extra_sbatch=[--qos=high\rx]"], "holds a control character"),
    (["run_dir=/tmp/a\nb"], "holds a control character"),
])
def test_launch_options_that_would_break_a_directive_are_refused(args: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        split_launch_args(args)


def test_a_run_dir_with_spaces_or_a_newline_in_an_override_is_refused_with_exit_2(tmp_path, capsys, monkeypatch):
    from agentforge.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["launch", "slurm", "recipe=debug", f"run_dir={tmp_path / 'my runs'}", "--dry-run"]) == 2
    assert "holds a space" in capsys.readouterr().err
    assert main(["launch", "slurm", "recipe=debug", "logger.project=a\nb", "--dry-run"]) == 2  # Hydra's grammar
    assert capsys.readouterr().err.startswith("agentforge: config error")
    assert not list(tmp_path.glob("PWNED*"))
