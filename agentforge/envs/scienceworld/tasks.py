"""Which (task name, variation) an agentforge Task plays, from the package's own task list and variation splits.

agentforge's splits map to the package's: train → train, eval → dev, test → test (`get_variations_train/dev/test`
of each task; disjoint by construction). Seed index k = seed − split base (train 0, eval 1e6, test 2e6) picks
task `names[k % T]` and variation `split_variations[(k // T) % V]`: consecutive seeds cycle through the tasks, so
any batch of T consecutive seeds covers every task once instead of T variations of one task.

Task names are the package's (`scienceworld.constants`, in the paper's task-id order 1-1 … 10-2); aliases the
package accepts (`task-1-boil`, `1-1`, "Matter Changes of State (Boiling)") are normalised with its `infer_task`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from agentforge.envs.scienceworld.jvm import require_scienceworld
from agentforge.errors import ConfigError
from agentforge.tasks import SPLIT_SEED_BASE
from agentforge.types import Task

PACKAGE_SPLIT = {"train": "train", "eval": "dev", "test": "test"}
SIMPLIFICATIONS = ("easy", "teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors",
                   "noElectricalAction")

_SPLITS: dict[str, dict[str, tuple[int, ...]]] = {}
_SPLITS_LOCK = threading.Lock()
_KEYING_LOCK = threading.Lock()  # one keying JVM at a time (env workers key on threads)


def all_task_names() -> tuple[str, ...]:
    """The package's 30 tasks in the paper's order."""
    require_scienceworld()
    from scienceworld.constants import ID2TASK
    from scienceworld.utils import infer_task

    return tuple(infer_task(name) for name in ID2TASK.values())


def resolve_task_names(task_names: Sequence[str] | str | None) -> tuple[str, ...]:
    """The env's task list: all tasks for None, else the given names normalised and checked (order kept)."""
    known = all_task_names()
    if task_names is None:
        return known
    if isinstance(task_names, str):
        task_names = [task_names]
    from scienceworld.utils import infer_task

    names = []
    for raw in task_names:
        name = infer_task(str(raw))
        if name not in known:
            raise ConfigError(f"unknown ScienceWorld task {raw!r} in env.task_names; valid names: {', '.join(known)}")
        if name not in names:
            names.append(name)
    if not names:
        raise ConfigError("env.task_names is empty; list at least one ScienceWorld task or use null for all")
    return tuple(names)


def resolve_simplifications(simplifications: Sequence[str] | str | None) -> str:
    """The package's comma-separated simplification string ("" for none), checked before a JVM starts."""
    if simplifications is None:
        return ""
    parts = simplifications.split(",") if isinstance(simplifications, str) else list(simplifications)
    parts = [str(p).strip() for p in parts if str(p).strip()]
    for part in parts:
        if part not in SIMPLIFICATIONS:
            raise ConfigError(f"unknown ScienceWorld simplification {part!r}; valid: {', '.join(SIMPLIFICATIONS)} "
                              "(comma-separated or a list; 'easy' = all of them)")
    return ",".join(parts)


def split_variations(server: Any, task_name: str) -> dict[str, tuple[int, ...]]:
    """The package's train/dev/test variation lists of a task, read once per process through a simulator.

    Reading them means loading the task (its variation 0) on `server`, so callers load their own episode after.
    """
    with _SPLITS_LOCK:
        if task_name not in _SPLITS:
            server.load(task_name, 0, "", False)
            _SPLITS[task_name] = {
                "train": tuple(int(v) for v in server.getVariationsTrain()),
                "dev": tuple(int(v) for v in server.getVariationsDev()),
                "test": tuple(int(v) for v in server.getVariationsTest()),
            }
        return _SPLITS[task_name]


def read_all_variations(java_options: str, server_path: str | None = None) -> None:
    """Every task's variation lists, read through one simulator started for it and stopped after: what task keys
    need (`pick_task` without an episode's JVM). All 30 tasks at once (~3 s after a ~1 s JVM start), so a process
    starts at most one such JVM whichever task lists its envs name; an env that has played reads its own anyway."""
    from agentforge.envs.scienceworld.jvm import start_simulator, stop_simulator

    with _KEYING_LOCK:
        missing = [name for name in all_task_names() if name not in _SPLITS]
        if not missing:
            return
        simulator = start_simulator(java_options, server_path)
        try:
            for name in missing:
                split_variations(simulator.server, name)
        finally:
            stop_simulator(simulator)


def variations_known(task_names: Sequence[str]) -> bool:
    return all(name in _SPLITS for name in task_names)


def task_index(task: Task) -> int:
    if task.split not in PACKAGE_SPLIT:
        raise ConfigError(f"unknown split {task.split!r} for scienceworld; valid splits: {', '.join(PACKAGE_SPLIT)}")
    return task.seed - SPLIT_SEED_BASE[task.split]


def pick_task(task: Task, task_names: Sequence[str], server: Any) -> tuple[str, int]:
    """(task name, variation) for an agentforge task; deterministic in (seed, split, task_names)."""
    index = task_index(task)
    name = task_names[index % len(task_names)]
    variations = split_variations(server, name)[PACKAGE_SPLIT[task.split]]
    if not variations:
        raise ConfigError(f"ScienceWorld task {name!r} has no {PACKAGE_SPLIT[task.split]} variations")
    return name, variations[(index // len(task_names)) % len(variations)]
