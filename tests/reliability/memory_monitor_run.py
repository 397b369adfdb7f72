"""Run by test_memory_monitor.py in a fresh process (Ray reads its memory-monitor settings when it starts):
scripted Sokoban episodes on a Ray pool whose env, once, takes more and more memory on one step; with the
monitor's threshold set a little above the machine's current use, Ray's memory monitor kills that worker. Prints
one JSON line: whether the pool's results equal an undisturbed in-process run's, and its fault counts."""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from agentforge.envs.base import ENVS
from agentforge.envs.sokoban import ACTIONS, SokobanEnv
from agentforge.hosting.pool import EnvPool, LocalEnvPool, RayEnvPool, ensure_ray
from agentforge.types import Task

OPTIONS = {"dim_room": [6, 6], "num_boxes": 2, "max_steps": 8}
SEEDS = [3, 8, 21, 40]
CHUNK = 256 * 2**20
HOG_CAP = 6 * 2**30  # grows until the monitor kills it, at most this much


class MemoryHog(SokobanEnv):
    """Sokoban that, once (a marker file), on its 3rd step takes memory in touched 256 MiB chunks, 5 per second,
    until Ray's memory monitor kills it (or `HOG_CAP`, then it lets go and carries on)."""

    def __init__(self, once_file: str, **options: Any) -> None:
        super().__init__(**options)
        self.once_file = once_file

    def step(self, action: str) -> Any:
        if self.steps_taken + 1 == 3 and not os.path.exists(self.once_file):
            Path(self.once_file).touch()
            hog = []
            while len(hog) * CHUNK < HOG_CAP:
                chunk = bytearray(CHUNK)
                for i in range(0, CHUNK, 4096):
                    chunk[i] = 1
                hog.append(chunk)
                time.sleep(0.2)
            del hog
        return super().step(action)


ENVS.register("memory_hog_test")(MemoryHog)


def play(pool: EnvPool) -> list[Any]:
    rng = random.Random(5)
    plan = {slot: [rng.choice(ACTIONS) for _ in range(OPTIONS["max_steps"])] for slot in range(len(SEEDS))}
    record: list[Any] = [[o.anchor for o in pool.reset([Task(env="sokoban", seed=s) for s in SEEDS])]]
    turn = 0
    while pool.active_slots:
        results = pool.step({slot: plan[slot][turn] for slot in pool.active_slots})
        record.append(sorted((s, r.observation.anchor, r.reward, r.done) for s, r in results.items()))
        turn += 1
    return record


def main(once_file: str) -> None:
    from ray import cloudpickle

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ensure_ray(num_cpus=2)
    with LocalEnvPool("sokoban", OPTIONS) as local:
        expected = play(local)
    with RayEnvPool("memory_hog_test", {**OPTIONS, "once_file": once_file}, num_workers=2, max_restarts=5) as pool:
        got = play(pool)
        counts = pool.fault_counts()
    print(json.dumps({"equal": got == expected, "counts": counts, "hogged": os.path.exists(once_file)}))


if __name__ == "__main__":
    main(sys.argv[1])
