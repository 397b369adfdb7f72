"""Resume on requeue, on the real local Slurm: a job warned before its time limit (SIGUSR1 to the batch shell, what
`--signal=B:USR1@<secs>` sends) checkpoints, requeues itself and finishes from that checkpoint; a job requeued from
outside (`scontrol requeue`: SIGTERM, then killed) restarts from its last periodic checkpoint. Either way every
iteration is logged exactly once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentforge.tracking.tracker import read_metrics
from tests.slurm.conftest import (
    TINY_RUN,
    complete_checkpoints,
    metric_steps,
    run,
    wait_for_end,
    wait_until,
)

ITERATIONS = 4
# the warning test signals after the first iteration: on a quiet machine the tiny run's other iterations take
# 0.3 s each, so with 4 the run could end before the signal lands (seen); 40 leave ~12 s for it
WARNED_ITERATIONS = 40


def launch(slurm: dict[str, str], run_dir: Path, port: int, *overrides: str,
           iterations: int = ITERATIONS) -> tuple[str, Path]:
    run([sys.executable, "-m", "agentforge.cli", "launch", "slurm", f"run_dir={run_dir}", "nodes=1",
         "cpus_per_node=2", "time=30:00", "signal_seconds=60", f"ray_port={port}", *TINY_RUN,
         f"trainer.iterations={iterations}", *overrides], slurm, timeout=180)
    job = (run_dir / "slurm_job_id").read_text().strip()
    return job, run_dir / f"slurm-{job}.out"


def test_time_limit_warning_checkpoints_requeues_and_resumes(slurm: dict[str, str], tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    job, log = launch(slurm, run_dir, 23500, "trainer.checkpoint_every=0",  # only the warning writes a checkpoint
                      iterations=WARNED_ITERATIONS)
    wait_until(lambda: len(metric_steps(run_dir)) >= 1, 600, "the first iteration", log)
    run(["scancel", "--signal=USR1", "--batch", job], slurm)  # what Slurm sends signal_seconds before the limit
    state = wait_for_end(job, slurm, timeout=900, log=log)
    text = log.read_text()
    assert state == "COMPLETED", text[-4000:]
    assert "SIGUSR1: time limit near" in text and "trainer exited with status 138" in text, text[-4000:]
    assert "requeueing this job" in text and "restart count 1" in text, text[-4000:]
    assert "resumed from" in text, text[-4000:]
    assert metric_steps(run_dir) == list(range(1, WARNED_ITERATIONS + 1))
    saved = complete_checkpoints(run_dir)  # checkpoint_every=0: the warning's checkpoint is the only one
    assert len(saved) == 1 and 1 <= saved[0] < WARNED_ITERATIONS, saved
    assert f"resumed from {run_dir}/checkpoints/iter_{saved[0]:06d}" in text


ASYNCHRONOUS = ["engine.replicas=1", "engine.replica_cpus=1", "trainer.asynchronous.max_staleness=1",
                "learner.old_logprobs=recompute", "learner.rollout_correction.is_level=token"]


@pytest.mark.parametrize("mode", ["synchronous", "asynchronous"])
def test_external_requeue_restarts_from_the_last_checkpoint(slurm: dict[str, str], tmp_path: Path, mode: str) -> None:
    """Asynchronous (k = 1, an engine replica beside the learner): the checkpoint holds the batches played ahead,
    and the resumed run still never trains a turn more than k versions old."""
    run_dir = tmp_path / "run"
    job, log = launch(slurm, run_dir, 23700 if mode == "synchronous" else 23900,  # checkpoint_every=1 (TINY_RUN)
                      *(ASYNCHRONOUS if mode == "asynchronous" else []))
    wait_until(lambda: len(complete_checkpoints(run_dir)) >= 1, 600, "the first checkpoint", log)
    run(["scontrol", "requeue", job], slurm)  # preemption-style: SIGTERM to every process, then killed, requeued
    state = wait_for_end(job, slurm, timeout=900, log=log)
    text = log.read_text()
    assert state == "COMPLETED", text[-4000:]
    assert "restart count 1" in text and "resumed from" in text, text[-4000:]
    assert metric_steps(run_dir) == list(range(1, ITERATIONS + 1))  # the interrupted iteration redone, once
    if mode == "asynchronous":
        rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "async/staleness_max" in r]
        assert len(rows) == ITERATIONS and all(r["async/staleness_max"] <= 1 for r in rows), rows
