"""Progress read from a file (CI, Slurm logs): plain status lines, at least one per heartbeat interval."""

from __future__ import annotations

import time

import pytest

from agentforge.rollout.workflow import RolloutStats
from agentforge.tracking.progress import TrainProgress, rollout_progress

pytestmark = pytest.mark.unit


def test_a_long_phase_prints_a_line_every_interval(monkeypatch, capsys):
    monkeypatch.setenv("AGENTFORGE_PROGRESS", "lines")
    monkeypatch.setenv("AGENTFORGE_PROGRESS_SECONDS", "0.3")
    with TrainProgress(total_iterations=3, start=0) as progress:
        update = progress.rollout_callback("rollout 1")
        update(2, 8, RolloutStats(turns=4, generated_tokens=100, generate_seconds=2.0))
        progress.phase("learner update (8 samples, 4000 tokens)")
        time.sleep(1.1)  # a learner step that reports nothing by itself
        progress.iteration_done(1, {"train/mean_return": 0.5, "train/success_rate": 0.25, "train/loss": 0.1})
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[train]")]
    assert lines[0].startswith("[train] iteration 1/3 · rollout 1 started")
    beats = [line for line in lines if "learner update" in line]
    assert len(beats) >= 3, lines  # announced once, then repeated by the heartbeat
    assert "iteration 1/3 done · reward +0.50 · success 0.25" in lines[-1]


def test_rollout_progress_in_lines_mode_reports_episodes(monkeypatch, capsys):
    monkeypatch.setenv("AGENTFORGE_PROGRESS", "lines")
    with rollout_progress("eval", 4) as update:
        update(4, 4, RolloutStats(turns=8, generated_tokens=50, generate_seconds=1.0, env_steps=8, env_seconds=0.1))
    err = capsys.readouterr().err
    assert "[eval] 0/4 episodes" in err and "[eval] 4/4 episodes · 8 turns · 50 tok/s · 80 steps/s" in err


def test_iteration_lines_carry_an_eta_from_this_process_wall_time(monkeypatch, capsys):
    monkeypatch.setenv("AGENTFORGE_PROGRESS", "lines")
    with TrainProgress(total_iterations=4, start=0) as progress:
        time.sleep(0.6)
        progress.iteration_done(1, {})
        progress.iteration_done(4, {})  # the last one: nothing left to estimate
    lines = [line for line in capsys.readouterr().err.splitlines() if " done · " in line]
    assert "ETA 0:01" in lines[0], lines  # 0.6 s per iteration x 3 left
    assert "ETA" not in lines[-1], lines
