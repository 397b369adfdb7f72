"""The floor of an eval table: a uniformly random admissible action on the same held-out tasks.

Why: a success rate means little without it. On Sokoban rooms generated close to solved a random walk solves about
half of them, so a model "solving 36 %" can be worse than chance; a floor row in every table says how much of a
rate is planning. Played in-process on the env class itself (no engine, no Ray), seeded per task, and cached under
$AGENTFORGE_CACHE/floors (the same tasks, options and turn budget always give the same floor).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

from agentforge.envs.base import make_env
from agentforge.types import Task


class NoFloor(Exception):
    """The env lists no admissible actions: a uniformly random action is undefined (no floor row)."""


def cache_dir() -> Path:
    return Path(os.environ.get("AGENTFORGE_CACHE", Path.home() / ".cache" / "agentforge")) / "floors"


def random_floor(env_name: str, options: dict[str, Any], tasks: list[Task], max_turns: int,
                 episodes: int = 1, seed: int = 0) -> dict[str, list[bool]]:
    """Per task key, whether each of `episodes` random-admissible-action episodes won."""
    identity = json.dumps([env_name, options, [t.key for t in tasks], max_turns, episodes, seed],
                          sort_keys=True, default=str)
    path = cache_dir() / f"{env_name}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.json"
    if path.exists():
        return json.loads(path.read_text())
    env = make_env(env_name, options)
    try:
        outcomes = {t.key: [_play(env, t, max_turns, random.Random(f"{seed}:{t.key}:{e}"))
                                  for e in range(episodes)] for t in tasks}
    finally:
        env.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(outcomes))
    return outcomes


def _play(env: Any, task: Task, max_turns: int, rng: random.Random) -> bool:
    observation = env.reset(task)
    for _ in range(max_turns):
        if not observation.admissible:
            raise NoFloor(f"env {task.env!r} lists no admissible actions")
        result = env.step(rng.choice(list(observation.admissible)))
        if result.done:
            return bool(result.won)
        observation = result.observation
    return False
