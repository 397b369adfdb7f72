"""Ctrl-C on a real `agentforge train` process (tiny model): it says at once that it is stopping, abandons the current
step, closes Ray, the engine and the env workers, exits with status 130 and leaves its last checkpoint complete;
a second Ctrl-C stops at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration

ARGS = [
    "recipe=debug", "logger.wandb=false", "env_pool.kind=ray", "trainer.iterations=200",
    "trainer.tasks_per_iteration=2", "trainer.group_size=2", "trainer.eval_before=false", "trainer.eval_every=0",
    "trainer.checkpoint_every=1", "agent.max_turns=2", "agent.sampling.max_new_tokens=16",
]


def start(run_dir: Path, log: Path, as_background_job: bool = False) -> subprocess.Popen:
    """`as_background_job`: start with SIGINT ignored, as a shell without job control starts `cmd &`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if as_background_job else None
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "agentforge.cli", "train", *ARGS, f"hydra.run.dir={run_dir}"],
                                stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=ignore)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def complete_checkpoints(run_dir: Path) -> list[Path]:
    return sorted(p for p in (run_dir / "checkpoints").glob("iter_*") if (p / "COMPLETE").exists())


def descendants(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def test_first_ctrl_c_stops_promptly_and_cleanly(tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "log.txt"
    proc = start(run_dir, log, as_background_job=True)  # SIGINT sent by `kill -INT` still stops it
    try:
        wait_for(lambda: len(complete_checkpoints(run_dir)) >= 1 or proc.poll() is not None, 300, "a checkpoint")
        assert proc.poll() is None, log.read_text()[-3000:]
        children = descendants(proc.pid)
        assert children, "a Ray runtime should be running under the trainer"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: "stopping" in log.read_text(), 5, "the stopping message")
        said = time.monotonic() - sent
        status = proc.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert status == 130, text[-3000:]
    assert said < 5 and took < 60, (said, took)
    assert "last complete checkpoint" in text and "resume=" in text
    wait_for(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                             for p in children), 20, "Ray's processes to end")
    last = complete_checkpoints(run_dir)[-1]
    assert (last / "learner" / "COMPLETE").exists() and (last / "trainer_state.json").exists()
    partial = [p for p in (run_dir / "checkpoints").glob("iter_*") if not (p / "COMPLETE").exists()]
    assert partial == [], partial  # a Ctrl-C during a save waits for it to complete


def test_second_ctrl_c_stops_at_once(tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "log.txt"
    proc = start(run_dir, log)
    try:
        wait_for(lambda: (run_dir / "metrics.jsonl").exists() or proc.poll() is not None, 300, "a first iteration")
        assert proc.poll() is None, log.read_text()[-3000:]
        children = descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: "stopping" in log.read_text(), 5, "the stopping message")
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=10)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert status == 130 and took < 5, (status, took, log.read_text()[-2000:])
    wait_for(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                             for p in children), 20, "child processes to be killed")
