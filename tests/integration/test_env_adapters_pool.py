"""Library adapters (gem, textarena, textarena self-play, gym, verifiers) in the Ray env pool: a worker killed
mid-episode is restarted and its episodes replayed, and the pool shows exactly what in-process envs show (the
adapters' private RNG states make the replays exact; in self-play, whose move it is too)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentforge.hosting.pool import EnvPool, LocalEnvPool, RayEnvPool
from agentforge.types import Task

pytestmark = pytest.mark.integration

CASES = {
    "gem": ({"id": "game:Game2048-v0-easy"}, ["up", "down", "left", "right"]),  # a random tile after every move
    "textarena": ({"id": "TicTacToe-v0", "player": -1}, [str(i) for i in range(9)]),  # random opponent
    "textarena self-play": ({"id": "TicTacToe-v0", "opponent": "self"}, [str(i) for i in range(9)]),  # both sides
    "gym": ({"id": "FrozenLake-v1"}, ["left", "down", "right", "up"]),  # slippery: the seed decides the slips
    "verifiers": ({}, [str(i) for i in range(1, 11)]),  # the library's rollout thread is rebuilt and replayed
}
SEEDS = [3, 3, 8, 21, 40]
TURNS = 6


@pytest.fixture(scope="module", autouse=True)
def ray_runtime(ray_with_module_classes: None) -> None:
    """The pools here run on one Ray runtime."""


def play(pool: EnvPool, env: str, moves: list[str], on_turn: Any = None) -> list[Any]:
    record: list[Any] = [[o.text for o in pool.reset([Task(env, s) for s in SEEDS])]]
    rng = random.Random(7)
    plan = {slot: [rng.choice(moves) for _ in range(TURNS)] for slot in range(len(SEEDS))}
    for turn in range(TURNS):
        if not pool.active_slots:
            break
        if on_turn is not None:
            on_turn(pool, turn)
        results = pool.step({slot: plan[slot][turn] for slot in pool.active_slots})
        record.append(sorted((s, r.observation.text, r.observation.info, r.reward, r.done, r.won)
                             for s, r in results.items()))
    return record


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_killed_worker_is_restarted_and_its_adapter_episodes_replayed(case: str) -> None:
    env = case.split()[0]
    pytest.importorskip({"gem": "gem", "textarena": "textarena", "gym": "gymnasium", "verifiers": "verifiers"}[env])
    options, moves = CASES[case]
    with LocalEnvPool(env, options) as local:
        expected = play(local, env, moves)

    def kill(pool: RayEnvPool, turn: int) -> None:
        if turn == 2:
            pool.kill_worker(0)

    with RayEnvPool(env, options, num_workers=2, max_restarts=2) as pool:
        assert play(pool, env, moves, on_turn=kill) == expected
        assert pool.restarts == 1
    assert len(expected) > 3  # the kill landed mid-episode
