"""`agentforge train` killed with SIGKILL mid-rollout, mid-update and mid-checkpoint-write, resumed each time with
`resume=true`: the finished run's metrics equal an uninterrupted run's, no checkpoint is ever half-visible, and
nothing the killed processes started (Ray's gcs, raylet, agents, env workers) outlives them."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from reliability_runs import TRAIN, finish, kill_at_fault, launch, metrics, survivors, tail

from agentforge.reliability.checkpoint import MARKER, PARTIAL, CheckpointManager

pytestmark = pytest.mark.integration

# Measured (docs/reliability.md): the resumed runs' metrics were bit-identical to the uninterrupted run's (same
# thread count, same engine, same seeds). The tolerance only allows for float sums whose order could change
# between processes (a different OMP thread split of a reduction), never for a lost update or a replayed sample.
REL_TOL, ABS_TOL = 1e-6, 1e-9


def checkpoints_are_whole(run_dir: Path) -> list[int]:
    """Every visible checkpoint is complete; returns their iterations."""
    root = run_dir / "checkpoints"
    visible = sorted(root.glob("iter_*"))
    for path in visible:
        assert (path / MARKER).is_file(), f"{path} is visible but incomplete"
        assert (path / "learner" / MARKER).is_file() and (path / "trainer_state.json").is_file()
    return [c.iteration for c in CheckpointManager(root).complete()]


def test_sigkill_at_random_points_then_resume_equals_the_uninterrupted_run(tmp_path):
    seed = int(os.environ.get("AGENTFORGE_RELIABILITY_SEED", "0"))
    rng = random.Random(seed)
    # where to kill: a random moment (0-0.5 s, while the engine generates) after the rollout of iteration 2 or 3
    # starts; then, after a resume, stopped between a random update's backward passes and its optimizer step; then,
    # after the next resume, stopped in a random checkpoint save with every file written but not yet published.
    # (The tiny model writes no valid action, so its episodes step no env: the pool's reset marks the rollout.)
    plan = [(f"env_reset:{rng.randint(2, 3)}", rng.uniform(0.0, 0.5)), (f"optimizer_step:{rng.randint(1, 2)}", 0.0),
            (f"checkpoint_write:{rng.randint(1, 2)}", 0.0)]
    (tmp_path / "ref").mkdir()
    (tmp_path / "runs").mkdir()
    reference = launch(tmp_path / "ref", tmp_path / "ref.log", [*TRAIN, f"run_dir={tmp_path / 'ref' / 'run'}"])

    run_dir = tmp_path / "runs" / "run"
    kills = []
    for attempt, (fault, delay) in enumerate(plan):
        overrides = [*TRAIN, f"run_dir={run_dir}"] if attempt == 0 else \
            [*TRAIN, "resume=true", f"run_dir={tmp_path / 'runs' / f'resume_{attempt}'}"]
        log = tmp_path / f"attempt_{attempt}.log"
        proc = launch(tmp_path / "runs", log, overrides, fault=fault, pause=delay == 0.0)
        killed = kill_at_fault(proc, tmp_path / "runs", log, delay)
        assert killed["point"] == fault, tail(log)
        left = survivors(killed["descendants"])
        assert not left, f"killed at {fault}, these outlived the run: {left}"
        assert len(killed["descendants"]) >= 4, "expected Ray's processes under the run"  # gcs, raylet, workers
        complete = checkpoints_are_whole(run_dir)
        if fault.startswith("checkpoint_write"):
            assert list((run_dir / "checkpoints").glob(f"{PARTIAL}iter_*")), "the kill left no hidden partial"
        kills.append((fault, round(delay, 2), complete))
        if attempt == 0:
            assert complete, f"killed at {fault} before the first checkpoint:\n{tail(log)}"

    final_log = tmp_path / "final.log"
    finish(launch(tmp_path / "runs", final_log, [*TRAIN, "resume=true", f"run_dir={tmp_path / 'runs' / 'final'}"]),
           final_log)
    finish(reference, tmp_path / "ref.log")
    assert "resumed from" in final_log.read_text()
    assert checkpoints_are_whole(run_dir) == [3, 4]
    assert not list((run_dir / "checkpoints").glob(".*")), "a partial checkpoint was left behind"

    expected, got = metrics(tmp_path / "ref" / "run"), metrics(run_dir)
    assert sorted(got) == sorted(expected) == [1, 2, 3, 4]
    worst = 0.0
    for iteration, row in expected.items():
        assert set(got[iteration]) == set(row), iteration
        for key, value in row.items():
            assert got[iteration][key] == pytest.approx(value, rel=REL_TOL, abs=ABS_TOL), (iteration, key, kills)
            worst = max(worst, abs(got[iteration][key] - value))
    print(f"kills {kills} (seed {seed}); largest metric difference vs the uninterrupted run: {worst:g}")
