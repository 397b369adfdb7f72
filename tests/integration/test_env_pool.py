"""Env pools on a real Ray runtime: same results as in-process, and workers that really die are recovered."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from agentforge.envs.base import ENVS
from agentforge.envs.sokoban import ACTIONS, SokobanEnv
from agentforge.errors import ConfigError, EnvWorkerError
from agentforge.hosting.pool import EnvPool, LocalEnvPool, RayEnvPool, make_pool
from agentforge.types import Task

pytestmark = pytest.mark.integration

OPTIONS = {"dim_room": [6, 6], "num_boxes": 2, "max_steps": 12}
SEEDS = [3, 3, 8, 8, 21, 21, 40]  # groups of 2 share a seed; an odd count leaves workers unevenly loaded


class CrashingSokoban(SokobanEnv):
    """Sokoban whose process really dies (os._exit) on a given step: a hard crash, as a segfaulting env would."""

    def __init__(
        self, crash_at_step: int, crash_once_file: str | None = None, crash_seed: int | None = None, **options: Any
    ) -> None:
        super().__init__(**options)
        self.crash_at_step = crash_at_step
        self.crash_once_file = crash_once_file
        self.crash_seed = crash_seed
        self.seed: int | None = None

    def reset(self, task: Task) -> Any:
        self.seed = task.seed
        return super().reset(task)

    def step(self, action: str) -> Any:
        if self.steps_taken + 1 == self.crash_at_step and self.crash_seed in (None, self.seed):
            if self.crash_once_file is None:
                os._exit(1)
            if not os.path.exists(self.crash_once_file):
                Path(self.crash_once_file).touch()
                os._exit(1)
        return super().step(action)


ENVS.register("crashing_sokoban_test")(CrashingSokoban)


@pytest.fixture(scope="module", autouse=True)
def ray_runtime(ray_with_module_classes: None) -> None:
    """Every test here runs on Ray, with this module's env classes shipped to the actors."""


def tasks() -> list[Task]:
    return [Task(env="sokoban", seed=s) for s in SEEDS]


def scripts() -> dict[int, list[str]]:
    rng = random.Random(5)
    return {slot: [rng.choice(ACTIONS) for _ in range(OPTIONS["max_steps"])] for slot in range(len(SEEDS))}


def play(pool: EnvPool, on_turn: Any = None) -> list[Any]:
    """Scripted episodes for every slot; returns everything the pool showed, turn by turn."""
    record: list[Any] = [[(o.text, o.anchor, o.admissible) for o in pool.reset(tasks())]]
    plan = scripts()
    turn = 0
    while pool.active_slots:
        if on_turn is not None:
            on_turn(pool, turn)
        results = pool.step({slot: plan[slot][turn] for slot in pool.active_slots})
        record.append(sorted((s, r.observation.anchor, r.reward, r.done, r.won, r.info) for s, r in results.items()))
        turn += 1
    return record


@pytest.fixture(scope="module")
def local_record() -> list[Any]:
    with LocalEnvPool("sokoban", OPTIONS) as pool:
        return play(pool)


def test_ray_pool_equals_local_pool(local_record: list[Any]) -> None:
    with RayEnvPool("sokoban", OPTIONS, num_workers=2) as pool:
        assert play(pool) == local_record
        assert play(pool) == local_record  # a second round on the same actors
        assert pool.restarts == 0
    assert len(local_record) == OPTIONS["max_steps"] + 1  # some episodes ran to the step limit


def test_killed_workers_are_restarted_and_episodes_replayed(local_record: list[Any]) -> None:
    def kill(pool: RayEnvPool, turn: int) -> None:
        if turn == 3:
            pool.kill_worker(0)
        if turn == 6:
            pool.kill_worker(0)
            pool.kill_worker(1)

    with RayEnvPool("sokoban", OPTIONS, num_workers=2, max_restarts=2) as pool:
        pids = pool.worker_pids()
        assert play(pool, on_turn=kill) == local_record
        assert pool.restarts == 3 and pool.worker_restarts == [2, 1]
        assert set(pool.worker_pids()).isdisjoint(pids)


def test_a_worker_that_crashes_mid_step_is_recovered(local_record: list[Any], tmp_path: Path) -> None:
    # only the env of slot 6 (seed 40, on worker 0) crashes, once: the other worker must be left alone
    crash_once = {**OPTIONS, "crash_at_step": 5, "crash_once_file": str(tmp_path / "crashed"), "crash_seed": 40}
    with RayEnvPool("crashing_sokoban_test", crash_once, num_workers=2) as pool:
        assert play(pool) == local_record
        assert (tmp_path / "crashed").exists()
        assert pool.restarts == 1 and pool.worker_restarts == [1, 0]


def test_a_worker_that_keeps_dying_raises_env_worker_error() -> None:
    crashing = {**OPTIONS, "crash_at_step": 2}
    with RayEnvPool("crashing_sokoban_test", crashing, num_workers=2, max_restarts=2) as pool:
        pool.reset(tasks())
        pool.step(dict.fromkeys(range(len(SEEDS)), "up"))
        with pytest.raises(EnvWorkerError) as caught:
            pool.step(dict.fromkeys(range(len(SEEDS)), "up"))
        message = str(caught.value)
        assert "'crashing_sokoban_test'" in message and "worker 0" in message
        assert "seeds [3, 8, 21, 40]" in message  # slots 0, 2, 4, 6 live on worker 0
        assert "env_pool=local" in message
        assert pool.worker_restarts[0] == 2


def test_env_errors_propagate_without_restarts_and_keep_other_slots_consistent() -> None:
    def bad_action_round(pool: EnvPool) -> list[Any]:
        pool.reset(tasks()[:4])
        with pytest.raises(ValueError, match="unknown Sokoban action 'jump'") as caught:
            pool.step({0: "left", 1: "jump", 2: "up", 3: "down"})
        assert "slot 1" in "".join(getattr(caught.value, "__notes__", []))
        assert pool.active_slots == [0, 2, 3]
        with pytest.raises(ValueError, match="done"):
            pool.step({1: "up"})
        with pytest.raises(ValueError, match="no episode"):
            pool.step({9: "up"})
        results = pool.step({0: "right", 2: "right", 3: "right"})
        return sorted((s, r.observation.anchor, r.reward, r.info["steps"]) for s, r in results.items())

    with LocalEnvPool("sokoban", OPTIONS) as local, RayEnvPool("sokoban", OPTIONS, num_workers=2) as remote:
        expected = bad_action_round(local)
        assert bad_action_round(remote) == expected
        assert [steps for *_, steps in expected] == [2, 2, 2]
        assert remote.restarts == 0


def test_make_pool_and_bad_names() -> None:
    with make_pool("local", "sokoban", OPTIONS, num_workers=4) as pool:
        assert isinstance(pool, LocalEnvPool)
    with make_pool("ray", "sokoban", OPTIONS, num_workers=1) as pool:
        assert isinstance(pool, RayEnvPool)
        assert len(pool.reset(tasks()[:3])) == 3
    with pytest.raises(ConfigError, match="valid env pools: ray, local"):
        make_pool("threads", "sokoban", OPTIONS)
    with pytest.raises(ConfigError, match="unknown env 'sokobam'"):
        make_pool("ray", "sokobam", OPTIONS)
    with pytest.raises(ConfigError, match="unknown env pool options"):
        make_pool("local", "sokoban", OPTIONS, workers=2)


def test_task_options_are_played_as_an_env_built_with_them_through_a_restart() -> None:
    """A curriculum's tasks carry env options (`Task.options`): each is played exactly as an env built with those
    options would play it, in a Ray pool whose worker is killed mid-episode (the restart rebuilds the task's env
    with its options and replays); tasks without options (held-out ones) keep the pool's own options."""
    one_box = (("num_boxes", 1),)
    mixed = [Task("sokoban", s, options=one_box if i % 2 else ()) for i, s in enumerate(SEEDS)]
    plan = scripts()
    expected = {}
    for slot, task in enumerate(mixed):
        env = SokobanEnv(**{**OPTIONS, **dict(task.options)})
        shown = [env.reset(Task("sokoban", task.seed)).anchor]
        for action in plan[slot]:
            result = env.step(action)
            shown.append((result.observation.anchor, result.reward, result.done, result.won))
            if result.done:
                break
        expected[slot] = shown

    def played(pool: EnvPool, kill_at: int | None) -> dict[int, list[Any]]:
        shown = {slot: [o.anchor] for slot, o in enumerate(pool.reset(mixed))}
        turn = 0
        while pool.active_slots:
            if turn == kill_at:
                pool.kill_worker(0)  # type: ignore[attr-defined]
            for slot, r in pool.step({slot: plan[slot][turn] for slot in pool.active_slots}).items():
                shown[slot].append((r.observation.anchor, r.reward, r.done, r.won))
            turn += 1
        return shown

    with LocalEnvPool("sokoban", OPTIONS) as local:
        assert played(local, None) == expected
    with RayEnvPool("sokoban", OPTIONS, num_workers=2, max_restarts=1) as pool:
        assert played(pool, 3) == expected
        assert pool.restarts == 1
    assert expected[0][0] != expected[1][0]  # seed 3 with two boxes and with one: the option reached the env
