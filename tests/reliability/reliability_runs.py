"""Real `agentforge train` processes for the reliability tests: launch, stop at a named fault point, SIGKILL, and
check that nothing the run started outlives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

# The tiny model through the transformers engine (starts in ~12 s instead of vLLM's ~25 s here), envs in Ray
# actors, a checkpoint every iteration. The entropy bonus makes every update move the weights even when all
# rewards are equal, so a resume that lost the optimizer state, the weights or an RNG stream shows in the metrics.
TRAIN = [
    "recipe=debug", "engine=hf", "env_pool.kind=ray", "env_pool.num_workers=2", "logger.wandb=false",
    "trainer.iterations=4", "trainer.tasks_per_iteration=2", "trainer.group_size=2", "trainer.eval_before=false",
    "trainer.eval_every=0", "trainer.checkpoint_every=1", "trainer.keep_checkpoints=2", "agent.max_turns=2",
    "agent.sampling.max_new_tokens=16", "learner.lr=1e-3", "learner.loss.entropy_coef=0.01", "seed=11",
]
# wall-clock figures differ between any two runs; everything else a run logs must not
TIMING_KEYS = ("time/", "_per_s", "step_time_s", "wall_seconds")
START_TIMEOUT_S = 300


def environment(**extra: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "2", "AGENTFORGE_PROGRESS": "lines", **extra}
    env.pop("RAY_ADDRESS", None)
    return env


def launch(cwd: Path, log: Path, overrides: list[str], fault: str | None = None,
           pause: bool = True) -> subprocess.Popen[bytes]:
    """`agentforge train <overrides>` as its own process; with `fault`, it announces that fault point and stops
    (sleeps) there, or with `pause=False` goes on (the test then kills it a moment later, wherever it is)."""
    extra = {}
    if fault is not None:
        extra = {"AGENTFORGE_FAULT_AT": fault, "AGENTFORGE_FAULT_FILE": str(cwd / "fault_reached"),
                 "AGENTFORGE_FAULT_SLEEP": "600" if pause else "0"}
        (cwd / "fault_reached").unlink(missing_ok=True)
    out = log.open("wb")
    return subprocess.Popen([sys.executable, "-m", "agentforge.cli", "train", *overrides], cwd=cwd,
                            stdout=out, stderr=subprocess.STDOUT, env=environment(**extra))


def finish(proc: subprocess.Popen[bytes], log: Path, timeout: float = 600) -> None:
    """Wait for a run to end by itself; fail with its log's tail when it did not succeed."""
    code = proc.wait(timeout=timeout)
    assert code == 0, f"agentforge train exited with {code}:\n{tail(log)}"


def kill_at_fault(proc: subprocess.Popen[bytes], cwd: Path, log: Path, delay: float = 0.0) -> dict[str, Any]:
    """Wait for the run to reach its fault point, SIGKILL it there (or `delay` seconds later), and return what it had
    started (to check that all of it goes away): {"point": ..., "descendants": [psutil.Process, ...]}."""
    marker = cwd / "fault_reached"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not marker.exists():
        assert proc.poll() is None, f"the run ended (status {proc.returncode}) before its fault point:\n{tail(log)}"
        assert time.monotonic() < deadline, f"the run did not reach its fault point:\n{tail(log)}"
        time.sleep(0.1)
    point = marker.read_text().strip()
    descendants = psutil.Process(proc.pid).children(recursive=True)
    time.sleep(delay)
    descendants += [p for p in psutil.Process(proc.pid).children(recursive=True) if p not in descendants]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    return {"point": point, "descendants": descendants}


def survivors(processes: list[psutil.Process], timeout: float = 20) -> list[str]:
    """The processes still running `timeout` seconds later (zombies count as gone), described."""
    deadline = time.monotonic() + timeout
    alive = processes
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _running(p)]
        time.sleep(0.5)
    return [f"{p.pid} {p.name()}" for p in alive if _running(p)]


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def metrics(run_dir: Path) -> dict[int, dict[str, float]]:
    """metrics.jsonl by iteration, without wall-clock figures."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {row["iteration"]: {k: v for k, v in row.items() if k != "iteration" and isinstance(v, int | float)
                               and not any(t in k for t in TIMING_KEYS)} for row in rows}


def tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"
