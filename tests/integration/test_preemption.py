"""A scheduler's stop on a real `agentforge train` process (tiny model): SIGUSR1 (Slurm's warning before the time
limit) or SIGTERM finishes the current iteration, writes a checkpoint, exits with 128 + the signal; `resume=auto` in
the same run dir then continues from that checkpoint. Ctrl-C's behaviour is tested in test_interrupt.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentforge.errors import ConfigError

pytestmark = pytest.mark.integration

ARGS = [
    "recipe=debug", "logger.wandb=false", "env_pool.kind=ray", "trainer.tasks_per_iteration=2",
    "trainer.group_size=2", "trainer.eval_before=false", "trainer.eval_every=0", "trainer.checkpoint_every=0",
    "agent.max_turns=2", "agent.sampling.max_new_tokens=16",
]


ASYNCHRONOUS = ["engine.replicas=1", "engine.replica_cpus=1", "trainer.asynchronous.max_staleness=1",
                "learner.old_logprobs=recompute"]


def train(run_dir: Path, log: Path, iterations: int, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "agentforge.cli", "train", *ARGS, *extra, f"trainer.iterations={iterations}",
             f"hydra.run.dir={run_dir}", "resume=auto"], stdout=out, stderr=subprocess.STDOUT, env=env)


def logged_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["iteration"] for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(("signum", "extra"), [(signal.SIGUSR1, ()), (signal.SIGTERM, ()),
                                               (signal.SIGUSR1, tuple(ASYNCHRONOUS))],
                         ids=["SIGUSR1", "SIGTERM", "SIGUSR1-asynchronous"])
def test_scheduler_signal_checkpoints_then_resume_auto_continues(tmp_path: Path, signum: int, extra: tuple) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "log.txt"
    proc = train(run_dir, log, iterations=200, extra=extra)  # checkpoint_every=0: only the signal writes one
    try:
        deadline = time.monotonic() + 300
        while not logged_steps(run_dir) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert proc.poll() is None and logged_steps(run_dir), log.read_text()[-3000:]
        proc.send_signal(signum)
        rc = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert rc == 128 + signum, text[-3000:]
    assert "checkpoint after the current iteration" in text, text[-3000:]
    checkpoints = sorted(p for p in (run_dir / "checkpoints").glob("iter_*") if (p / "COMPLETE").exists())
    assert len(checkpoints) == 1, checkpoints
    saved = json.loads((checkpoints[0] / "trainer_state.json").read_text())["iteration"]
    assert saved == logged_steps(run_dir)[-1] < 200  # the iteration in flight finished and was kept

    # the requeued job: same command, same run dir; resume=auto picks the checkpoint up and runs one more iteration
    proc = train(run_dir, log, iterations=saved + 1, extra=extra)
    assert proc.wait(timeout=400) == 0, log.read_text()[-3000:]
    assert f"resumed from {checkpoints[0]}" in log.read_text().replace("\n", "")
    assert logged_steps(run_dir) == list(range(1, saved + 2))  # no iteration lost or repeated
    if extra:  # asynchronous: the batch played ahead was kept by the checkpoint and trained after the resume
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
        assert rows[-1]["async/staleness_max"] <= 1 and rows[-1]["async/dropped_groups"] == 0
        assert "batch(es) played before the checkpoint" in log.read_text()


def test_resume_auto_starts_fresh_without_a_checkpoint(tmp_path: Path) -> None:
    from agentforge.commands.train_checks import resolve_resume_dir
    from agentforge.schema.compose import compose_config

    cfg = compose_config(["recipe=debug", "command=train", "resume=auto"], run_dir=str(tmp_path / "run"))
    assert resolve_resume_dir(cfg) is None
    (tmp_path / "run" / "checkpoints" / "iter_000001").mkdir(parents=True)
    assert resolve_resume_dir(cfg) is None  # incomplete: no COMPLETE marker
    (tmp_path / "run" / "checkpoints" / "iter_000001" / "COMPLETE").write_text("1")
    with pytest.raises(ConfigError, match="no config.yaml"):  # not a dir `agentforge train` wrote
        resolve_resume_dir(cfg)
    (tmp_path / "run" / "config.yaml").write_text("command: train\n")
    assert resolve_resume_dir(cfg) == tmp_path / "run"
