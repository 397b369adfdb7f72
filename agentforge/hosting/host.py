"""The part of an env pool that lives next to the envs: `EnvHost` holds one env per slot, in-process (`LocalEnvPool`)
or as a Ray actor (`RayEnvPool`), and runs every env call where the driver's `probe` can see it.

Each slot's env is built with the pool's options and the task's own (`Task.options`, a curriculum's level), and
rebuilt when a task asks for others; replays run on a scratch env, never on a slot's. An env call that raises is
carried back as a `_Failure` with its traceback text, so one env's bug does not lose the other slots' results.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentforge.envs.base import Env
from agentforge.envs.replay import ReplayResult, replay
from agentforge.types import Observation, StepResult, Task


@dataclass
class _Failure:
    """An exception an env raised, carried back with its traceback text (tracebacks do not cross processes)."""

    error: BaseException
    trace: str


class EnvHost:
    """Hosts many envs, one per slot, created lazily. Runs in-process (LocalEnvPool) or as a Ray actor."""

    def __init__(self, env_factory: Callable[..., Env], env_options: dict[str, Any] | None = None,
                 own_process: bool = False) -> None:
        self._factory = env_factory
        self._options = dict(env_options or {})
        self._envs: dict[int, Env] = {}
        self._env_options: dict[int, tuple[tuple[str, Any], ...]] = {}  # the task options a slot's env was built with
        self._scratch: Env | None = None  # replays run here, one after another, never on a slot's env
        self._scratch_options: tuple[tuple[str, Any], ...] = ()
        # the env calls running now, by thread: (method, slot, since); several with `env_pool.step_threads` > 1
        self._busy: dict[int, tuple[str, int, float]] = {}
        if own_process:  # a Ray env worker: when it is killed, its children (a ScienceWorld JVM) go with it
            from agentforge.reliability.reaper import start_reaper

            start_reaper()

    def _build(self, options: tuple[tuple[str, Any], ...]) -> Env:
        """An env with the host's options and a task's own over them (`Task.options`: a curriculum's level)."""
        return self._factory(**{**self._options, **dict(options)})

    def _env(self, slot: int, task: Task | None = None) -> Env:
        """The slot's env, built anew when the task asks for other options than the one it holds was built with."""
        options = task.options if task is not None else self._env_options.get(slot, ())
        if slot in self._envs and self._env_options.get(slot, ()) != options:
            old = self._envs.pop(slot)
            self._guarded("close", slot, old.close)
        if slot not in self._envs:
            self._envs[slot] = self._build(options)
            self._env_options[slot] = options
        return self._envs[slot]

    def _keep_only(self, items: list[tuple[int, Any]]) -> None:
        wanted = {item[0] for item in items}
        for slot in [s for s in self._envs if s not in wanted]:
            self._envs.pop(slot).close()
            self._env_options.pop(slot, None)

    def reset(self, items: list[tuple[int, Task]]) -> list[Observation | _Failure]:
        """Start one episode per (slot, task); envs of slots not named are closed (this host's new set)."""
        self._keep_only(items)
        return [self._guarded("reset", slot, lambda s=slot, t=task: self._env(s, t).reset(t)) for slot, task in items]

    def reset_with_prefixes(self, items: list[tuple[int, tuple[Task, list[str]]]]) -> list[ReplayResult | _Failure]:
        """Like `reset`, then replay each slot's prefix on its env (branching); an empty prefix is a plain reset."""
        self._keep_only(items)
        return [self._guarded("reset", slot, lambda s=slot, t=task, p=prefix: self._start(s, t, p))
                for slot, (task, prefix) in items]

    def _start(self, slot: int, task: Task, prefix: list[str]) -> ReplayResult:
        if prefix:
            return replay(self._env(slot, task), task, prefix)
        return ReplayResult(task, self._env(slot, task).reset(task))  # any env can start without a prefix

    def step(self, items: list[tuple[int, str]]) -> list[StepResult | _Failure]:
        return [self._guarded("step", slot, lambda s=slot, a=action: self._envs[s].step(a)) for slot, action in items]

    def retry_step(self, items: list[tuple[int, tuple[Task, list[str], str]]]) -> list[StepResult | _Failure]:
        """Step again on a fresh env: the slot's env raised, so its state is unknown; rebuild it from the log."""
        return [self._guarded("retry_step", slot, lambda s=slot, r=request: self._fresh_step(s, *r))
                for slot, request in items]

    def _fresh_step(self, slot: int, task: Task, actions: list[str], action: str) -> StepResult:
        old = self._envs.pop(slot, None)
        if old is not None:
            self._guarded("close", slot, old.close)
        env = self._env(slot, task)
        env.reset(task)
        for done_action in actions:
            env.step(done_action)
        return env.step(action)

    def replay(self, items: list[tuple[int, tuple[Task, list[str], bool]]]) -> list[ReplayResult | _Failure]:
        """Counterfactual replays on this host's scratch env, in order; the slots' episodes are left as they are."""
        return [self._guarded("replay", index, lambda r=request: self._scratch_replay(*r)) for index, request in items]

    def _scratch_replay(self, task: Task, actions: list[str], stop_when_done: bool) -> ReplayResult:
        if self._scratch is not None and self._scratch_options != task.options:
            scratch, self._scratch = self._scratch, None
            self._guarded("close", -1, scratch.close)
        if self._scratch is None:
            self._scratch = self._build(task.options)
            self._scratch_options = task.options
        try:
            return replay(self._scratch, task, actions, stop_when_done)
        except Exception:  # an env that raised may be in any state: the next replay gets a fresh one
            scratch, self._scratch = self._scratch, None
            self._guarded("close", -1, scratch.close)
            raise

    def restore(self, episodes: list[tuple[int, Task, list[str]]]) -> int:
        """Rebuild episodes from their logs after a restart; returns the number of steps replayed."""
        self._keep_only([(slot, task) for slot, task, _ in episodes])
        steps = 0
        for slot, task, actions in episodes:
            self._timed("restore", slot, lambda s=slot, t=task: self._env(s, t).reset(t))
            for action in actions:
                self._timed("restore", slot, lambda s=slot, a=action: self._envs[s].step(a))
                steps += 1
        return steps

    def probe(self) -> tuple[str, int, float] | None:
        """The env call running now, as (method, slot, seconds so far), or None; Ray runs it on a second thread."""
        running = list(self._busy.values())
        if not running:
            return None
        method, slot, since = min(running, key=lambda call: call[2])  # the longest-running call
        return method, slot, time.monotonic() - since

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()
        if self._scratch is not None:
            self._scratch.close()
            self._scratch = None

    def _timed(self, method: str, slot: int, call: Callable[[], Any]) -> Any:
        """Run one env call where `probe` can see it; a call inside another (a close in a retry) hands back."""
        thread = threading.get_ident()
        outer = self._busy.get(thread)
        self._busy[thread] = (method, slot, time.monotonic())
        try:
            return call()
        finally:
            if outer is None:
                self._busy.pop(thread, None)
            else:
                self._busy[thread] = outer

    def _guarded(self, method: str, slot: int, call: Callable[[], Any]) -> Any:
        try:
            return self._timed(method, slot, call)
        except Exception as err:  # one env's bug must not lose the other envs' results in the batch
            return _Failure(err, traceback.format_exc())
