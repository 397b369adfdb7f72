"""Progress read from a file (CI, Slurm logs): plain status lines, at least one per heartbeat interval."""

from __future__ import annotations

import re
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
    assert "[eval] 0/4 episodes" in err and "[eval] 4/4 episodes · 8 turns · 8 env steps · " in err
    assert "50 tok/s" in err and "ETA" not in err  # finished: nothing left to estimate


def test_a_slow_eval_line_shows_a_nonzero_rate_and_the_turn_budgets_eta(monkeypatch):
    """The issue's line: 128 episodes of up to 50 turns, 256 turns played in 6 minutes and no env step taken (no
    turn held a valid action) read `0 steps/s` with no ETA."""
    from agentforge.tracking.progress import remaining_turns, rollout_rates

    stats = RolloutStats(turns=256, generated_tokens=40_000, generate_seconds=250.0, env_steps=0, env_seconds=3.0)
    line = rollout_rates(stats, elapsed=360.0, finished=0, total=128, max_turns=50)
    assert line.startswith("256 turns · 0 env steps · 0.71 turns/s · 160 tok/s · ETA ≤ ")
    # at most 128 x 50 - 256 = 6144 turns left at 256/360 turns/s: 8640 s
    assert remaining_turns(0, 128, 256, 50) == 6144 and line.endswith("ETA ≤ 2:24:00")
    # finished episodes play no more: 100 of 128 done after 300 turns leaves at most 28 x 50 turns
    assert remaining_turns(100, 128, 300, 50) == 1400
    assert remaining_turns(100, 128, 5100, 50) == 1400 - 100  # unfinished ones played at least 100 of them


def test_train_progress_eval_line_carries_the_eta(monkeypatch, capsys):
    monkeypatch.setenv("AGENTFORGE_PROGRESS", "lines")
    monkeypatch.setenv("AGENTFORGE_PROGRESS_SECONDS", "0.2")
    with TrainProgress(total_iterations=2, start=0, max_turns=10) as progress:
        update = progress.rollout_callback("eval")
        time.sleep(0.5)
        update(0, 4, RolloutStats(turns=4, generated_tokens=10, generate_seconds=1.0))
        time.sleep(0.3)
    lines = [line for line in capsys.readouterr().err.splitlines() if "eval 0/4 episodes" in line]
    assert lines and "turns/s" in lines[-1] and "ETA ≤ 0:0" in lines[-1], lines  # 36 turns left at ~8/s


def test_iteration_lines_carry_an_eta_from_this_process_wall_time(monkeypatch, capsys):
    monkeypatch.setenv("AGENTFORGE_PROGRESS", "lines")
    with TrainProgress(total_iterations=4, start=0) as progress:
        time.sleep(0.6)
        progress.iteration_done(1, {})
        progress.iteration_done(4, {})  # the last one: nothing left to estimate
    lines = [line for line in capsys.readouterr().err.splitlines() if " done · " in line]
    assert "ETA 0:01" in lines[0], lines  # 0.6 s per iteration x 3 left
    assert "ETA" not in lines[-1], lines


def test_the_eta_leaves_out_the_warm_start_and_first_evals(monkeypatch, capsys):
    monkeypatch.setenv("AGENTFORGE_PROGRESS", "lines")
    with TrainProgress(total_iterations=4, start=0) as progress:
        time.sleep(1.5)  # iteration 0: evals and a warm start, not repeated by the iterations to come
        progress.iterations_begin()
        time.sleep(0.2)
        progress.iteration_done(1, {})
    line = next(line for line in capsys.readouterr().err.splitlines() if " done · " in line)
    minutes, seconds = re.search(r"ETA (\d+):(\d+)", line).groups()
    assert 60 * int(minutes) + int(seconds) < 4, line  # ~0.2 s per iteration x 3 left, not (1.5 + 0.2) x 3 = 0:05


def test_a_beat_between_two_callbacks_shows_the_live_counters(monkeypatch, capsys):
    """Per-episode scheduling calls back only when an episode ends: the heartbeat reads the live stats itself."""
    monkeypatch.setenv("AGENTFORGE_PROGRESS", "lines")
    monkeypatch.setenv("AGENTFORGE_PROGRESS_SECONDS", "0.2")
    stats = RolloutStats(turns=2, generated_tokens=10, generate_seconds=1.0)
    with rollout_progress("eval", 8, max_turns=5) as update:
        update(0, 8, stats)
        stats.turns, stats.env_steps = 30, 12  # the workflow goes on playing; no callback yet
        time.sleep(0.6)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[eval] 0/8")]
    assert "30 turns · 12 env steps" in lines[-1] and "ETA ≤ " in lines[-1], lines
