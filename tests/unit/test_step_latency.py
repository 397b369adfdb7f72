"""Injected env step latency (`env_pool.step_latency`): reproducible per (task, step), heavy-tailed as asked, and
checked."""

from __future__ import annotations

import statistics
import time

import pytest

from agentforge.errors import ConfigError
from agentforge.hosting.latency import LatencyEnv, StepLatency
from agentforge.hosting.pool import LocalEnvPool
from agentforge.types import Task

pytestmark = pytest.mark.unit


def test_the_same_task_and_step_sleep_the_same_in_every_run():
    latency = StepLatency(median_s=0.2, sigma=1.0)
    task = Task(env="sokoban", seed=4)
    assert [latency.seconds(task, i) for i in range(5)] == [StepLatency(median_s=0.2).seconds(task, i)
                                                             for i in range(5)]
    assert latency.seconds(task, 0) != latency.seconds(Task(env="sokoban", seed=5), 0)
    assert latency.seconds(task, 0) != StepLatency(median_s=0.2, seed=1).seconds(task, 0)


@pytest.mark.parametrize(("dist", "tail"), [("lognormal", 3.6), ("pareto", 2.5)])
def test_distributions_have_the_median_and_a_heavy_tail(dist, tail):
    latency = StepLatency(dist=dist, median_s=0.1, sigma=1.0, alpha=1.5, max_s=100)
    draws = sorted(latency.seconds(Task(env="x", seed=s), i) for s in range(200) for i in range(20))
    assert statistics.median(draws) == pytest.approx(0.1, rel=0.1)
    assert draws[int(0.9 * len(draws))] > tail * 0.1 * 0.8  # p90 well above the median
    assert StepLatency(dist="fixed", median_s=0.3).seconds(Task(env="x", seed=0), 7) == 0.3
    assert max(StepLatency(median_s=0.1, max_s=0.2).seconds(Task(env="x", seed=s), 0) for s in range(500)) == 0.2


def test_a_pool_with_latency_sleeps_before_each_step_and_plays_the_same_episode():
    options = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 10}
    task = Task(env="sokoban", seed=3)
    latency = {"dist": "fixed", "median_s": 0.05}
    with LocalEnvPool("sokoban", options) as plain, LocalEnvPool("sokoban", options, step_latency=latency) as slow:
        assert plain.reset([task])[0].anchor == slow.reset([task])[0].anchor
        started, steps = time.perf_counter(), 0
        for action in ("up", "left", "down", "right"):
            if not plain.active_slots:
                break
            a, b = plain.step({0: action})[0], slow.step({0: action})[0]
            assert (a.observation.anchor, a.reward, a.done) == (b.observation.anchor, b.reward, b.done)
            steps += 1
        assert time.perf_counter() - started >= steps * 0.05 and steps >= 1
        assert slow.env_factory.replayable and "latency" in slow.env_factory.__name__


def test_bad_latency_settings_name_the_key():
    with pytest.raises(ConfigError, match="step_latency.dist='gauss'"):
        StepLatency(dist="gauss")
    with pytest.raises(ConfigError, match=r"unknown env_pool.step_latency option\(s\) \['mean'\]"):
        StepLatency.from_options({"mean": 1})
    with pytest.raises(ConfigError, match="median_s and max_s must be >= 0"):
        StepLatency(median_s=-1)
    assert StepLatency.from_options(None) is None


def test_the_wrapper_forwards_the_inner_env():
    class Inner:
        replayable = False
        replay_note = "a live service"

        def close(self):
            self.closed = True

    env = LatencyEnv(Inner(), StepLatency())
    assert env.replayable is False and env.replay_note == "a live service"
    env.close()
    assert env.inner.closed
