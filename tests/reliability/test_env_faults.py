"""Env faults on a real Ray pool: hung envs (a user env that sleeps forever, a stopped worker process, a stopped
ScienceWorld JVM) are timed out, their worker killed, restarted and the episodes replayed; an env that raises is
retried on a fresh env and reported by name when it raises every time. Every episode must come out exactly as an
undisturbed in-process run plays it (zero episodes lost), and every fault is counted."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentforge.envs.base import ENVS
from agentforge.envs.sokoban import ACTIONS, SokobanEnv
from agentforge.errors import EnvWorkerError
from agentforge.hosting.pool import EnvPool, LocalEnvPool, RayEnvPool
from agentforge.types import Task

pytestmark = pytest.mark.integration

OPTIONS = {"dim_room": [6, 6], "num_boxes": 2, "max_steps": 10}
SEEDS = [3, 3, 8, 8, 21, 21, 40]  # slots 0, 2, 4, 6 live on worker 0 of a 2-worker pool
TIMEOUT_S = 3.0  # far above a Sokoban step (milliseconds) even on a loaded machine (load average 10-18 was seen)


class FaultySokoban(SokobanEnv):
    """A user env (registered by name, shipped to the actors by value) with a real fault on one step of one seed:
    `hang` sleeps for an hour (an engine that never answers), `raise` raises. With `once_file`, only the first
    time (the file marks that it happened); without it, every time."""

    def __init__(self, fault: str, at_step: int, fault_seed: int | None = None, once_file: str | None = None,
                 **options: Any) -> None:
        super().__init__(**options)
        self.fault, self.at_step, self.fault_seed, self.once_file = fault, at_step, fault_seed, once_file
        self.seed: int | None = None

    def reset(self, task: Task) -> Any:
        self.seed = task.seed
        return super().reset(task)

    def step(self, action: str) -> Any:
        if self.steps_taken + 1 == self.at_step and self.fault_seed in (None, self.seed) and self._fire():
            if self.fault == "hang":
                time.sleep(3600)
            raise RuntimeError(f"simulated engine failure at step {self.at_step}")
        return super().step(action)

    def _fire(self) -> bool:
        if self.once_file is None:
            return True
        if os.path.exists(self.once_file):
            return False
        Path(self.once_file).touch()
        return True


ENVS.register("faulty_sokoban_test")(FaultySokoban)


@pytest.fixture(scope="module", autouse=True)
def ray_runtime(ray_with_module_classes: None) -> None:
    """Every test here runs on Ray, with this module's env classes shipped to the actors."""


def tasks() -> list[Task]:
    return [Task(env="sokoban", seed=s) for s in SEEDS]


def play(pool: EnvPool, on_turn: Any = None) -> list[Any]:
    """Scripted episodes for every slot (the same random actions in every pool); everything the pool showed."""
    rng = random.Random(5)
    plan = {slot: [rng.choice(ACTIONS) for _ in range(OPTIONS["max_steps"])] for slot in range(len(SEEDS))}
    record: list[Any] = [[(o.text, o.anchor) for o in pool.reset(tasks())]]
    turn = 0
    while pool.active_slots:
        if on_turn is not None:
            on_turn(pool, turn)
        results = pool.step({slot: plan[slot][turn] for slot in pool.active_slots})
        record.append(sorted((s, r.observation.anchor, r.reward, r.done, r.won) for s, r in results.items()))
        turn += 1
    return record


@pytest.fixture(scope="module")
def undisturbed() -> list[Any]:
    with LocalEnvPool("sokoban", OPTIONS) as pool:
        return play(pool)


def test_a_hung_env_is_timed_out_its_worker_restarted_and_the_episodes_replayed(undisturbed, tmp_path):
    options = {**OPTIONS, "fault": "hang", "at_step": 3, "fault_seed": 40, "once_file": str(tmp_path / "hung")}
    with RayEnvPool("faulty_sokoban_test", options, num_workers=2, step_timeout_s=TIMEOUT_S) as pool:
        started = time.monotonic()
        assert play(pool) == undisturbed  # zero episodes lost, every one as if nothing happened
        took = time.monotonic() - started
        counts = pool.fault_counts()
    assert (tmp_path / "hung").exists()
    assert counts["timeouts"] == 1 and counts["restarts"] == 1 and pool.worker_restarts == [1, 0]
    assert counts["replayed_episodes"] == 4 and counts["replayed_steps"] == 4 * 2  # worker 0's slots, 2 steps each
    assert took < TIMEOUT_S + 20  # noticed right after the timeout, not after an hour


def test_an_env_that_always_hangs_is_reported_by_name_after_bounded_restarts():
    options = {**OPTIONS, "fault": "hang", "at_step": 2, "fault_seed": 40}
    with RayEnvPool("faulty_sokoban_test", options, num_workers=2, max_restarts=1, step_timeout_s=TIMEOUT_S) as pool:
        pool.reset(tasks())
        pool.step(dict.fromkeys(range(len(SEEDS)), "up"))
        with pytest.raises(EnvWorkerError) as caught:
            pool.step(dict.fromkeys(range(len(SEEDS)), "up"))
        assert pool.fault_counts()["timeouts"] == 2  # the step, then the same step again after the restart
    message = str(caught.value)
    assert "'faulty_sokoban_test'" in message and "worker 0" in message and "seeds [3, 8, 21, 40]" in message
    assert "step on slot" in message and "step_timeout_s=3" in message


def test_a_stopped_worker_process_is_timed_out_even_though_its_probe_cannot_answer(undisturbed):
    """SIGSTOP freezes the whole actor process (as an env holding the GIL in native code would): no thread of it
    answers, so the driver decides from the probe's silence."""

    def freeze(pool: RayEnvPool, turn: int) -> None:
        if turn == 3:
            os.kill(pool.worker_pids()[1], signal.SIGSTOP)

    with RayEnvPool("sokoban", OPTIONS, num_workers=2, step_timeout_s=TIMEOUT_S) as pool:
        assert play(pool, on_turn=freeze) == undisturbed
        assert pool.fault_counts()["timeouts"] == 1 and pool.worker_restarts == [0, 1]


def test_an_env_that_raises_once_is_retried_on_a_fresh_env(undisturbed, tmp_path):
    options = {**OPTIONS, "fault": "raise", "at_step": 4, "fault_seed": 40, "once_file": str(tmp_path / "raised")}
    with RayEnvPool("faulty_sokoban_test", options, num_workers=2) as pool:
        assert play(pool) == undisturbed
        counts = pool.fault_counts()
    assert (tmp_path / "raised").exists()
    assert counts["step_retries"] == 1 and counts["restarts"] == 0


@pytest.mark.parametrize("kind", ["ray", "local"])
def test_an_env_that_raises_on_every_step_is_reported_by_name_after_bounded_retries(kind):
    options = {**OPTIONS, "fault": "raise", "at_step": 3, "fault_seed": 40}
    pool: EnvPool = (RayEnvPool("faulty_sokoban_test", options, num_workers=2, step_retries=2) if kind == "ray"
                     else LocalEnvPool("faulty_sokoban_test", options, step_retries=2))
    with pool:
        pool.reset(tasks())
        for _ in range(2):
            pool.step(dict.fromkeys(pool.active_slots, "up"))
        with pytest.raises(RuntimeError, match="simulated engine failure") as caught:
            pool.step(dict.fromkeys(pool.active_slots, "up"))
        assert pool.fault_counts()["step_retries"] == 2
        assert pool.active_slots == [0, 1, 2, 3, 4, 5]  # the others stepped; slot 6 is out until the next reset
    note = "".join(getattr(caught.value, "__notes__", []))
    assert "env 'faulty_sokoban_test' raised while stepping slot 6" in note and "seed=40" in note
    assert "3 times" in note and "step_retries=2" in note


def test_a_stopped_scienceworld_jvm_is_timed_out_and_the_episode_replayed():
    """The real JVM, frozen with SIGSTOP mid-episode: the py4j call never returns; the worker is killed (its JVM
    with it, by the worker's reaper), a new one starts a new JVM and replays the episode."""
    pytest.importorskip("scienceworld")
    import shutil

    if shutil.which("java") is None:
        pytest.skip("ScienceWorld needs a java executable")
    options = {"task_names": ["find-non-living-thing"], "max_steps": 6}
    episode = [Task(env="scienceworld", seed=7)]
    actions = ["look around", "open door to kitchen", "look around", "inventory"]

    def run(pool: EnvPool, freeze_at: int | None) -> list[Any]:
        shown = [pool.reset(episode)[0].text]
        for turn, action in enumerate(actions):
            if turn == freeze_at:
                jvms = [p for p in psutil.Process(pool.worker_pids()[0]).children(recursive=True)
                        if "java" in p.name()]
                assert jvms, "the ScienceWorld worker has no JVM child"
                frozen.extend(jvms)
                for jvm in jvms:
                    jvm.suspend()
                deadline = time.monotonic() + 5
                while any(j.status() != psutil.STATUS_STOPPED for j in jvms) and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert all(j.status() == psutil.STATUS_STOPPED for j in jvms), [j.status() for j in jvms]
            result = pool.step({0: action})[0]
            shown.append((result.observation.text, result.reward, result.done))
        return shown

    frozen: list[psutil.Process] = []
    with LocalEnvPool("scienceworld", options) as local:
        expected = run(local, None)
    with RayEnvPool("scienceworld", options, num_workers=1, step_timeout_s=15) as pool:
        assert run(pool, freeze_at=2) == expected
        counts = pool.fault_counts()
    assert counts["timeouts"] == 1 and counts["replayed_steps"] == 2, counts
    gone, alive = psutil.wait_procs(frozen, timeout=10)
    assert not alive, f"the frozen JVM outlived its killed worker: {alive}"


# -- per-episode stepping (`submit_steps` / `collect_steps`): each slot's step its own call ---------------------------
def per_slot(record: list[Any]) -> dict[int, list[Any]]:
    """A lockstep `play` record as each slot's own sequence of results."""
    out: dict[int, list[Any]] = {slot: [obs] for slot, obs in enumerate(record[0])}
    for turn in record[1:]:
        for slot, *result in turn:
            out[slot].append(tuple(result))
    return out


def play_per_episode(pool: EnvPool, on_result: Any = None) -> dict[int, list[Any]]:
    """The same scripted episodes as `play`, each slot stepped as soon as its previous step returned."""
    import ray

    rng = random.Random(5)
    plan = {slot: [rng.choice(ACTIONS) for _ in range(OPTIONS["max_steps"])] for slot in range(len(SEEDS))}
    out: dict[int, list[Any]] = {slot: [(o.text, o.anchor)] for slot, o in enumerate(pool.reset(tasks()))}
    pool.submit_steps({slot: plan[slot][0] for slot in pool.active_slots})
    returned = 0
    while pool.steps_in_flight:
        results = pool.collect_steps()
        for slot, r in sorted(results.items()):
            out[slot].append((r.observation.anchor, r.reward, r.done, r.won))
            returned += 1
            if on_result is not None:
                on_result(pool, returned)
        pool.submit_steps({slot: plan[slot][len(out[slot]) - 1] for slot in results if not results[slot].done})
        if not results and pool.pending_steps():
            ray.wait(pool.pending_steps(), num_returns=1, timeout=pool.poll_seconds)
    return out


def test_per_episode_steps_survive_a_killed_worker_with_every_episode_as_undisturbed(undisturbed):
    def kill(pool: RayEnvPool, returned: int) -> None:
        if returned == 9:
            pool.kill_worker(0)

    with RayEnvPool("sokoban", OPTIONS, num_workers=2) as pool:
        assert play_per_episode(pool, on_result=kill) == per_slot(undisturbed)
        counts = pool.fault_counts()
    assert counts["restarts"] == 1 and pool.worker_restarts == [1, 0] and counts["replayed_episodes"] == 4


def test_per_episode_steps_time_out_a_hung_env_and_replay_its_worker(undisturbed, tmp_path):
    options = {**OPTIONS, "fault": "hang", "at_step": 3, "fault_seed": 40, "once_file": str(tmp_path / "hung")}
    with RayEnvPool("faulty_sokoban_test", options, num_workers=2, step_timeout_s=TIMEOUT_S) as pool:
        started = time.monotonic()
        assert play_per_episode(pool) == per_slot(undisturbed)
        took = time.monotonic() - started
        counts = pool.fault_counts()
    assert counts["timeouts"] == 1 and counts["restarts"] == 1 and pool.worker_restarts == [1, 0]
    assert took < TIMEOUT_S + 20


def test_per_episode_steps_retry_an_env_that_raises_once(undisturbed, tmp_path):
    options = {**OPTIONS, "fault": "raise", "at_step": 4, "fault_seed": 40, "once_file": str(tmp_path / "raised")}
    with RayEnvPool("faulty_sokoban_test", options, num_workers=2) as pool:
        assert play_per_episode(pool) == per_slot(undisturbed)
        assert pool.fault_counts()["step_retries"] == 1
    with LocalEnvPool("sokoban", OPTIONS) as pool:  # in-process: the same API, steps run when submitted
        assert play_per_episode(pool) == per_slot(undisturbed)
