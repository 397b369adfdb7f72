"""A task's identity is its content, not its seed: the key held-out sets are de-duplicated and kept out of training by.

Why: seeds say nothing about content. Sokoban rooms carved by a short topology walk repeat (256 eval seeds gave 208
distinct rooms, 56 of them also rooms of the training seeds), level-0 arithmetic questions repeat, a random 4×4 lake
repeats, and a dataset split smaller than the eval count repeats itself. So every env says what a task *is*: an
optional method beside `reset`,

    def task_key(self, task: Task) -> str | None

computed without playing (cheap, deterministic), naming what the agent faces and nothing else (Sokoban: walls,
boxes, targets and player; reasoning-gym: the question and its answer; ALFWorld: the game; ...), so two seeds that
give the same room give the same key. None (or no method) means the env cannot key its content; `TaskKeyer` then says
so once and falls back to the seed's identity. A probe catches envs whose start does not depend on the seed (a gym
id with a fixed map, TicTacToe): their tasks differ only in the sampling that plays them, and the keyer says that
too (held-out sets are then seeds, as before; a content split is impossible).

Keys are cached on disk (`$AGENTFORGE_CACHE/task_keys`), per env, options and key version: a room's key costs a
room generation (~1-2 ms at 6×6), and every run asks for the same held-out keys.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from agentforge.envs.base import ENVS
from agentforge.types import Task

log = logging.getLogger("agentforge.envs.task_keys")

KEY_VERSION = 2  # bump when any env's key changes meaning: cached keys of older versions are not read
PROBE_SEEDS = 12  # seeds of a split looked at to tell whether an env's start depends on the seed at all
SAVE_EVERY = 512  # new keys between writes of the disk cache


def cache_root() -> Path:
    return Path(os.environ.get("AGENTFORGE_CACHE", Path.home() / ".cache" / "agentforge")) / "task_keys"


def digest(key: str) -> str:
    """A short, stable fingerprint of a content key (what run records and committed results store)."""
    return hashlib.sha1(key.encode()).hexdigest()[:16]


class TaskKeyer:
    """Content keys for one env's tasks under one set of options (a task's own options, e.g. a curriculum level,
    go over them). `key(task)` is the content key, or the seed's identity where the env cannot key its content
    (`keyed` False, `note` says why)."""

    def __init__(self, env_name: str, env_options: dict[str, Any] | None = None, use_cache: bool = True) -> None:
        import agentforge.envs  # noqa: F401  (registers the built-in envs)

        self.env_name = env_name
        self.options = dict(env_options or {})
        self._envs: dict[tuple[tuple[str, Any], ...], Any] = {}
        self._memory: dict[str, str | None] = {}
        self._new = 0
        self._path = self._cache_path() if use_cache else None
        if self._path is not None and self._path.is_file():
            try:
                self._memory = json.loads(self._path.read_text())
            except (OSError, ValueError):
                self._memory = {}
        self.note: str | None = None
        self._probed = False

    # -- the key ---------------------------------------------------------------------------------------------------
    @property
    def keyed(self) -> bool:
        self._probe()
        return self.note is None

    def key(self, task: Task) -> str:
        """What the agent faces in `task` (content), or `task.key` (the seed) where content cannot be keyed."""
        self._probe()
        if self.note is not None:
            return f"seed:{task.key}"
        content = self._content(task)
        return content if content is not None else f"seed:{task.key}"

    def _content(self, task: Task) -> str | None:
        cached = task.key in self._memory
        if cached:
            return self._memory[task.key]
        content = self._env_for(task).task_key(task) if self._has_method(task) else None
        self._memory[task.key] = content
        self._new += 1
        if self._new >= SAVE_EVERY:
            self.save()
        return content

    def _probe(self) -> None:
        """Once: does the env key its content, and does its start depend on the seed?"""
        if self._probed:
            return
        self._probed = True
        probe = [Task(self.env_name, seed, "eval") for seed in _probe_seeds()]
        if not self._has_method(probe[0]):
            self.note = (f"env {self.env_name!r} does not say what its tasks contain (no task_key method): "
                         "held-out tasks are told apart by seed only, so an eval task may repeat a training task")
            return
        keys = [self._content(task) for task in probe]
        if any(k is None for k in keys):
            reason = getattr(self._env_for(probe[0]), "task_key_note", None) or "it returned no key"
            self.note = f"env {self.env_name!r} cannot key its tasks' content ({reason}): held-out tasks are seeds"
        elif len(set(keys)) == 1:
            self.note = (f"env {self.env_name!r}: every task starts the same (its start does not depend on the seed; "
                         "only the sampling that plays it differs), so held-out tasks are seeds, not distinct content")

    def _has_method(self, task: Task) -> bool:
        return callable(getattr(ENVS.get(self.env_name), "task_key", None))

    def _env_for(self, task: Task) -> Any:
        options = tuple(task.options)
        if options not in self._envs:
            self._envs[options] = ENVS.get(self.env_name)(**{**self.options, **dict(options)})
        return self._envs[options]

    # -- the cache -------------------------------------------------------------------------------------------------
    def _cache_path(self) -> Path:
        identity = json.dumps([KEY_VERSION, self.env_name, self.options], sort_keys=True, default=str)
        return cache_root() / f"{self.env_name}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.json"

    def save(self) -> None:
        """Write the keys computed so far (atomically: concurrent runs and test workers share the folder)."""
        if self._path is None or not self._new:
            return
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            scratch = self._path.with_suffix(f".{os.getpid()}.tmp")
            scratch.write_text(json.dumps(self._memory))
            scratch.replace(self._path)
            self._new = 0
        except OSError as error:  # a read-only home: keys are recomputed next time, nothing else changes
            log.info("task keys not cached (%s)", error)

    def close(self) -> None:
        self.save()
        for env in self._envs.values():
            try:
                env.close()
            except Exception as error:  # closing a probe env must not fail a run
                log.info("closing a task-key env: %s", error)
        self._envs.clear()


def _probe_seeds() -> list[int]:
    from agentforge.tasks import SPLIT_SEED_BASE

    return [SPLIT_SEED_BASE["eval"] + i for i in range(PROBE_SEEDS)]


class MixKeyer:
    """`env=mix`: each task keyed by its member env's keyer (a task names its member in `Task.env`)."""

    def __init__(self, env_options: dict[str, Any] | None = None, use_cache: bool = True) -> None:
        from agentforge.tasks import mix_members

        self.members = {name: TaskKeyer(name, options, use_cache)
                        for name, (_, options) in mix_members((env_options or {}).get("envs")).items()}

    @property
    def keyed(self) -> bool:
        return all(keyer.keyed for keyer in self.members.values())

    @property
    def note(self) -> str | None:
        notes = [keyer.note for keyer in self.members.values() if not keyer.keyed]
        return "; ".join(n for n in notes if n) or None

    def key(self, task: Task) -> str:
        return self.members[task.env].key(task)

    def save(self) -> None:
        for keyer in self.members.values():
            keyer.save()

    def close(self) -> None:
        for keyer in self.members.values():
            keyer.close()


def task_keyer(env_name: str, env_options: dict[str, Any] | None = None,
               use_cache: bool = True) -> TaskKeyer | MixKeyer:
    """The keyer of a run's env: one env's, or (`env=mix`) one per member."""
    from agentforge.tasks import MIX

    if env_name == MIX:
        return MixKeyer(env_options, use_cache)
    return TaskKeyer(env_name, env_options, use_cache)


def reserve_held_out(env_name: str, env_options: dict[str, Any] | None, reserve: int = 256,
                     wanted: dict[str, int] | None = None, seed_offsets: dict[str, int] | None = None,
                     use_cache: bool = True, select: Any = None) -> tuple[Any, TaskKeyer | MixKeyer]:
    """A run's held-out splits by content (`agentforge.tasks.held_out.HeldOut`): test, then eval, each at least
    `reserve` distinct tasks (more where `wanted` asks), per member env for `env=mix`; and the keyer (the caller
    closes it: training streams key their tasks with it)."""
    from agentforge.tasks import task_envs
    from agentforge.tasks.held_out import build_held_out

    sizes = {split: max(int(reserve), int((wanted or {}).get(split, 0))) for split in ("test", "eval")}
    keyer = task_keyer(env_name, env_options, use_cache)
    held_out = build_held_out(task_envs(env_name, env_options), sizes, keyer.key, digest, keyer.keyed, keyer.note,
                              seed_offsets, select)
    keyer.save()
    return held_out, keyer
