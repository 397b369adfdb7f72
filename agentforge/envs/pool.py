"""Env pools: many episodes stepped in batches, in-process (`LocalEnvPool`) or in Ray actors (`RayEnvPool`).

A pool hosts one env per slot; slot i plays `tasks[i]` of the last `reset`. The Ray pool keeps a log of every
slot's task and actions, so when a worker process dies it starts a replacement, replays the worker's episodes
(envs are deterministic given task and actions) and retries the call: results equal an uninterrupted run.

Replay and branching (`agentforge.envs.replay`): `replay(requests)` replays (task, actions) pairs on scratch envs
(one per worker, kept between calls) without touching the slots' episodes, spread over the workers in one call
each; `reset(tasks, prefixes)` starts slot i on tasks[i] and replays prefixes[i] on it, so sampling continues
from there (`reset_with_prefixes` also returns each prefix's per-step results). Prefix actions enter the slot's
action log like stepped ones, so crash recovery reproduces a branched episode too.
"""

from __future__ import annotations

import logging
import os
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentforge.envs.base import ENVS, Env, is_replayable
from agentforge.envs.replay import ReplayResult, checked_actions, replay
from agentforge.errors import ConfigError, EnvWorkerError
from agentforge.types import Observation, StepResult, Task

if TYPE_CHECKING:  # Ray is imported only when a Ray pool is used
    import ray

logger = logging.getLogger("agentforge.envs")

POOL_KINDS = ("ray", "local")
RAY_ONLY_OPTIONS = {"num_workers", "max_restarts", "actor_options"}


def resolve_env(env_name: str) -> Callable[..., Env]:
    """The env class for a registered name or `pkg.mod:Class`; fails early, in the driver, on a bad name."""
    import agentforge.envs  # noqa: F401  (registers the built-in envs)

    return ENVS.get(env_name)


# -- the part that lives next to the envs (in-process or in an actor) ----------------------------------------------
@dataclass
class _Failure:
    """An exception an env raised, carried back with its traceback text (tracebacks do not cross processes)."""

    error: BaseException
    trace: str


class EnvHost:
    """Hosts many envs, one per slot, created lazily. Runs in-process (LocalEnvPool) or as a Ray actor."""

    def __init__(self, env_factory: Callable[..., Env], env_options: dict[str, Any] | None = None) -> None:
        self._factory = env_factory
        self._options = dict(env_options or {})
        self._envs: dict[int, Env] = {}
        self._scratch: Env | None = None  # replays run here, one after another, never on a slot's env

    def _env(self, slot: int) -> Env:
        if slot not in self._envs:
            self._envs[slot] = self._factory(**self._options)
        return self._envs[slot]

    def _keep_only(self, items: list[tuple[int, Any]]) -> None:
        wanted = {item[0] for item in items}
        for slot in [s for s in self._envs if s not in wanted]:
            self._envs.pop(slot).close()

    def reset(self, items: list[tuple[int, Task]]) -> list[Observation | _Failure]:
        """Start one episode per (slot, task); envs of slots not named are closed (this host's new set)."""
        self._keep_only(items)
        return [self._guarded(lambda s=slot, t=task: self._env(s).reset(t)) for slot, task in items]

    def reset_with_prefixes(self, items: list[tuple[int, tuple[Task, list[str]]]]) -> list[ReplayResult | _Failure]:
        """Like `reset`, then replay each slot's prefix on its env (branching); an empty prefix is a plain reset."""
        self._keep_only(items)
        return [self._guarded(lambda s=slot, t=task, p=prefix: self._start(s, t, p)) for slot, (task, prefix) in items]

    def _start(self, slot: int, task: Task, prefix: list[str]) -> ReplayResult:
        if prefix:
            return replay(self._env(slot), task, prefix)
        return ReplayResult(task, self._env(slot).reset(task))  # any env can start without a prefix

    def step(self, items: list[tuple[int, str]]) -> list[StepResult | _Failure]:
        return [self._guarded(lambda s=slot, a=action: self._envs[s].step(a)) for slot, action in items]

    def replay(self, items: list[tuple[int, tuple[Task, list[str], bool]]]) -> list[ReplayResult | _Failure]:
        """Counterfactual replays on this host's scratch env, in order; the slots' episodes are left as they are."""
        return [self._guarded(lambda r=request: self._scratch_replay(*r)) for _, request in items]

    def _scratch_replay(self, task: Task, actions: list[str], stop_when_done: bool) -> ReplayResult:
        if self._scratch is None:
            self._scratch = self._factory(**self._options)
        try:
            return replay(self._scratch, task, actions, stop_when_done)
        except Exception:  # an env that raised may be in any state: the next replay gets a fresh one
            scratch, self._scratch = self._scratch, None
            self._guarded(scratch.close)
            raise

    def restore(self, episodes: list[tuple[int, Task, list[str]]]) -> int:
        """Rebuild episodes from their logs after a restart; returns the number of steps replayed."""
        self.reset([(slot, task) for slot, task, _ in episodes])
        steps = 0
        for slot, _, actions in episodes:
            for action in actions:
                self._envs[slot].step(action)
                steps += 1
        return steps

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()
        if self._scratch is not None:
            self._scratch.close()
            self._scratch = None

    @staticmethod
    def _guarded(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as err:  # one env's bug must not lose the other envs' results in the batch
            return _Failure(err, traceback.format_exc())


# -- the pools ------------------------------------------------------------------------------------------------------
@dataclass
class _Episode:
    task: Task
    actions: list[str] = field(default_factory=list)
    done: bool = False


class EnvPool(ABC):
    """Episodes by slot: `reset(tasks)` starts slot i on tasks[i]; `step({slot: action})` steps active slots."""

    def __init__(self, env_name: str, env_options: dict[str, Any] | None = None) -> None:
        self.env_name = env_name
        self.env_options = dict(env_options or {})
        self.env_factory = resolve_env(env_name)
        self._episodes: dict[int, _Episode] = {}

    @property
    def active_slots(self) -> list[int]:
        return [slot for slot, ep in self._episodes.items() if not ep.done]

    def reset(self, tasks: list[Task], prefixes: Sequence[Sequence[str]] | None = None) -> list[Observation]:
        """Start slot i on tasks[i]; with `prefixes`, replay prefixes[i] on it too and return the observation after it
        (see `reset_with_prefixes`)."""
        if prefixes is not None:
            return [result.observation for result in self.reset_with_prefixes(tasks, prefixes)]
        self._episodes = {slot: _Episode(task) for slot, task in enumerate(tasks)}
        results = self._reset(list(enumerate(tasks)))
        failure = next(((s, r) for s, r in results.items() if isinstance(r, _Failure)), None)
        if failure is not None:
            self._episodes = {}
            slot, fail = failure
            _raise_env_failure(fail, f"while resetting slot {slot} on {tasks[slot].describe()}")
        return [results[slot] for slot in range(len(tasks))]

    def reset_with_prefixes(self, tasks: list[Task], prefixes: Sequence[Sequence[str]]) -> list[ReplayResult]:
        """Branching: start slot i on tasks[i] and replay prefixes[i] on it; stepping the slot goes on from there.

        Returns each slot's replay (per-step observations, rewards, executable flags; `.observation` is where the
        branch starts). Prefix actions join the slot's action log, so crash recovery rebuilds the branched state.
        A prefix that ends its episode leaves the slot done (the rest is in `.unplayed`). An empty prefix is a
        plain reset; a non-empty one needs a replayable env (ConfigError naming the env otherwise).
        """
        if len(prefixes) != len(tasks):
            raise ValueError(f"reset got {len(tasks)} tasks but {len(prefixes)} prefixes; give one prefix per task "
                             "(an empty list for a plain reset)")
        pairs = zip(tasks, prefixes, strict=True)
        items = [(slot, (task, checked_actions(prefix))) for slot, (task, prefix) in enumerate(pairs)]
        self._episodes = {slot: _Episode(task) for slot, task in enumerate(tasks)}
        results = self._reset_with_prefixes(items)
        failure = next(((s, r) for s, r in results.items() if isinstance(r, _Failure)), None)
        if failure is not None:
            self._episodes = {}
            slot, fail = failure
            _raise_env_failure(fail, f"while resetting slot {slot} on {tasks[slot].describe()} and replaying its "
                                     f"prefix of {len(items[slot][1][1])} actions")
        out: list[ReplayResult] = []
        for slot in range(len(tasks)):
            result = results[slot]
            self._episodes[slot].actions = result.actions
            self._episodes[slot].done = result.done
            out.append(result)
        return out

    def replay(self, requests: Sequence[tuple[Task, Sequence[str]]], stop_when_done: bool = True) -> list[ReplayResult]:
        """Replay each (task, actions) from the task's initial state; results in request order.

        Runs on scratch envs (one per worker), so the pool's episodes are not disturbed; a Ray pool spreads the
        requests over its workers, one call each. See `agentforge.envs.replay.replay` for `stop_when_done`.
        """
        items: list[tuple[int, tuple[Task, list[str], bool]]] = []
        for index, request in enumerate(requests):
            if not (isinstance(request, tuple | list) and len(request) == 2 and isinstance(request[0], Task)):
                raise TypeError(f"replay request {index} must be a (Task, actions) pair, got {request!r}")
            items.append((index, (request[0], checked_actions(request[1]), stop_when_done)))
        if not items:
            return []
        results = self._replay(items)
        for index, (task, actions, _) in items:
            if isinstance(results[index], _Failure):
                _raise_env_failure(results[index], f"while replaying request {index} ({task.describe()}, "
                                                   f"{len(actions)} actions) on env {self.env_name!r}")
        return [results[index] for index, _ in items]

    def step(self, actions: dict[int, str]) -> dict[int, StepResult]:
        for slot in actions:
            episode = self._episodes.get(slot)
            if episode is None:
                last = len(self._episodes) - 1
                raise ValueError(f"slot {slot} has no episode: the last reset started slots 0..{last}")
            if episode.done:
                raise ValueError(f"slot {slot}'s episode ({episode.task.describe()}) is done; reset before stepping it")
        results = self._step(sorted(actions.items()))
        failure: tuple[int, _Failure] | None = None
        out: dict[int, StepResult] = {}
        for slot, result in results.items():
            if isinstance(result, _Failure):
                failure = failure or (slot, result)
                continue
            episode = self._episodes[slot]
            episode.actions.append(actions[slot])
            episode.done = result.done
            out[slot] = result
        if failure is not None:
            slot, fail = failure
            self._episodes[slot].done = True  # its env's state is unknown now; the slot is out until the next reset
            _raise_env_failure(fail, f"while stepping slot {slot} ({self._episodes[slot].task.describe()}) "
                                     f"with action {actions[slot]!r}")
        return out

    @abstractmethod
    def _reset(self, items: list[tuple[int, Task]]) -> dict[int, Observation | _Failure]: ...

    @abstractmethod
    def _step(self, items: list[tuple[int, str]]) -> dict[int, StepResult | _Failure]: ...

    @abstractmethod
    def _reset_with_prefixes(
        self, items: list[tuple[int, tuple[Task, list[str]]]]
    ) -> dict[int, ReplayResult | _Failure]: ...

    @abstractmethod
    def _replay(self, items: list[tuple[int, tuple[Task, list[str], bool]]]) -> dict[int, ReplayResult | _Failure]: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _raise_env_failure(fail: _Failure, where: str) -> None:
    note = f"[agentforge] {where}; env traceback:\n{fail.trace}"
    if hasattr(fail.error, "add_note"):  # Python >= 3.11
        fail.error.add_note(note)
    else:  # pragma: no cover
        logger.error(note)
    raise fail.error


class LocalEnvPool(EnvPool):
    """All envs in this process: for debugging (real tracebacks, breakpoints) and tests."""

    def __init__(self, env_name: str, env_options: dict[str, Any] | None = None) -> None:
        super().__init__(env_name, env_options)
        self._host = EnvHost(self.env_factory, self.env_options)

    def _reset(self, items: list[tuple[int, Task]]) -> dict[int, Observation | _Failure]:
        return dict(zip([s for s, _ in items], self._host.reset(items), strict=True))

    def _step(self, items: list[tuple[int, str]]) -> dict[int, StepResult | _Failure]:
        return dict(zip([s for s, _ in items], self._host.step(items), strict=True))

    def _reset_with_prefixes(
        self, items: list[tuple[int, tuple[Task, list[str]]]]
    ) -> dict[int, ReplayResult | _Failure]:
        return dict(zip([s for s, _ in items], self._host.reset_with_prefixes(items), strict=True))

    def _replay(self, items: list[tuple[int, tuple[Task, list[str], bool]]]) -> dict[int, ReplayResult | _Failure]:
        return dict(zip([i for i, _ in items], self._host.replay(items), strict=True))

    def close(self) -> None:
        self._host.close()


def _dead_worker_errors() -> tuple[type[BaseException], ...]:
    from ray import exceptions as rex

    return rex.RayActorError, rex.WorkerCrashedError, rex.OutOfMemoryError


class RayEnvPool(EnvPool):
    """Envs in `num_workers` Ray actors; slot i lives on worker i % num_workers; one batched call per worker.

    A dead worker is replaced and its episodes replayed, then the failed call is retried; after
    `max_restarts` consecutive deaths of one worker, EnvWorkerError names the env and the task seeds.
    """

    def __init__(
        self,
        env_name: str,
        env_options: dict[str, Any] | None = None,
        num_workers: int = 2,
        max_restarts: int = 3,
        actor_options: dict[str, Any] | None = None,
    ) -> None:
        if num_workers < 1:
            raise ConfigError(f"env pool num_workers must be >= 1, got {num_workers}")
        if max_restarts < 0:
            raise ConfigError(f"env pool max_restarts must be >= 0, got {max_restarts}")
        super().__init__(env_name, env_options)
        import ray

        ensure_ray()  # joins the runtime the trainer started, if any
        self.num_workers = num_workers
        self.max_restarts = max_restarts
        # env actors mostly wait on the trainer: request no CPU so many fit beside the engine and learner
        self.actor_options = {"num_cpus": 0, **(actor_options or {}), "max_restarts": 0, "max_task_retries": 0}
        self.restarts = 0
        self.worker_restarts = [0] * num_workers
        self._consecutive_deaths = [0] * num_workers
        self._actor_class = ray.remote(EnvHost)
        self._workers = [self._new_worker() for _ in range(num_workers)]

    def _new_worker(self) -> ray.actor.ActorHandle:
        return self._actor_class.options(**self.actor_options).remote(self.env_factory, self.env_options)

    def worker_of(self, slot: int) -> int:
        return slot % self.num_workers

    # -- batched calls with recovery -----------------------------------------------------------------------------
    def _reset(self, items: list[tuple[int, Task]]) -> dict[int, Observation | _Failure]:
        # every worker is called, even with no slots, so it drops the envs of the previous round
        return self._call_all("reset", self._by_worker(items, every_worker=True))

    def _step(self, items: list[tuple[int, str]]) -> dict[int, StepResult | _Failure]:
        return self._call_all("step", self._by_worker(items, every_worker=False))

    def _reset_with_prefixes(
        self, items: list[tuple[int, tuple[Task, list[str]]]]
    ) -> dict[int, ReplayResult | _Failure]:
        return self._call_all("reset_with_prefixes", self._by_worker(items, every_worker=True))

    def _replay(self, items: list[tuple[int, tuple[Task, list[str], bool]]]) -> dict[int, ReplayResult | _Failure]:
        return self._call_all("replay", self._spread(items))

    def _spread(self, items: list[tuple[int, tuple[Task, list[str], bool]]]) -> dict[int, list[tuple[int, Any]]]:
        """Replays sorted by task, cut into one contiguous run per worker of about equal work (a reset plus the
        actions): balanced, and each worker replays a task's requests back to back (ALFWorld reloads a game only
        when it changes, ~0.2 s vs ~0.45 s per reset)."""
        ordered = sorted(items, key=lambda item: _task_key(item[1][0]))
        costs = [1 + len(actions) for _, (_, actions, _) in ordered]
        total, done = sum(costs), 0
        groups: dict[int, list[tuple[int, Any]]] = {}
        for item, cost in zip(ordered, costs, strict=True):
            worker = min(int((done + cost / 2) * self.num_workers / total), self.num_workers - 1)
            groups.setdefault(worker, []).append(item)
            done += cost
        return groups

    def _by_worker(self, items: list[tuple[int, Any]], every_worker: bool) -> dict[int, list[tuple[int, Any]]]:
        groups: dict[int, list[tuple[int, Any]]] = {w: [] for w in range(self.num_workers)} if every_worker else {}
        for slot, item in items:
            groups.setdefault(self.worker_of(slot), []).append((slot, item))
        return groups

    def _call_all(self, method: str, groups: dict[int, list[tuple[int, Any]]]) -> dict[int, Any]:
        refs = {w: getattr(self._workers[w], method).remote(payload) for w, payload in groups.items()}
        out: dict[int, Any] = {}
        for w, ref in refs.items():  # all calls are in flight already; collect (and repair) worker by worker
            results = self._get_with_recovery(w, ref, method, groups[w])
            out.update(zip([slot for slot, _ in groups[w]], results, strict=True))
        return out

    def _get_with_recovery(self, w: int, ref: ray.ObjectRef, method: str, payload: list[tuple[int, Any]]) -> Any:
        import ray

        while True:
            try:
                result = ray.get(ref)
            except _dead_worker_errors() as err:
                self._replace_worker(w, err)
                ref = getattr(self._workers[w], method).remote(payload)
                continue
            self._consecutive_deaths[w] = 0
            return result

    def _replace_worker(self, w: int, err: BaseException) -> None:
        """Start a new actor for worker `w` and replay its episodes; repeated deaths raise EnvWorkerError."""
        import ray

        while True:
            if self._consecutive_deaths[w] >= self.max_restarts:
                raise self._worker_error(w, err) from err
            self._consecutive_deaths[w] += 1
            self.restarts += 1
            self.worker_restarts[w] += 1
            episodes = [(slot, ep.task, list(ep.actions)) for slot, ep in sorted(self._episodes.items())
                        if self.worker_of(slot) == w]
            logger.warning(
                "env worker %d (%s) died: %s; restart %d/%d, replaying %d episodes (%d steps)",
                w, self.env_name, type(err).__name__, self._consecutive_deaths[w], self.max_restarts,
                len(episodes), sum(len(a) for _, _, a in episodes),
            )
            if episodes and not is_replayable(self.env_factory):
                logger.warning("env %s declares replayable = False: its restored episodes may not be where they "
                               "were before the crash", self.env_name)
            self._kill(self._workers[w])
            self._workers[w] = self._new_worker()
            try:
                ray.get(self._workers[w].restore.remote(episodes))
                return
            except _dead_worker_errors() as replay_err:
                err = replay_err

    def _worker_error(self, w: int, err: BaseException) -> EnvWorkerError:
        seeds = sorted({ep.task.seed for slot, ep in self._episodes.items() if self.worker_of(slot) == w})
        return EnvWorkerError(
            f"env {self.env_name!r} worker {w} died {self._consecutive_deaths[w] + 1} times in a row "
            f"(max_restarts={self.max_restarts}) while hosting tasks with seeds {seeds}; last error: "
            f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}. To debug, run "
            f"the same tasks in-process with env_pool=local (a crash then happens in the driver, with its "
            f"traceback), or read the Ray worker logs under /tmp/ray/session_latest/logs/."
        )

    # -- fault injection and shutdown ----------------------------------------------------------------------------
    def kill_worker(self, i: int) -> None:
        """Kill worker i's process (fault-injection tests); the next call on it restarts and replays."""
        self._kill(self._workers[i])

    def worker_pids(self) -> list[int]:
        import ray

        return ray.get([w.pid.remote() for w in self._workers])

    @staticmethod
    def _kill(handle: ray.actor.ActorHandle) -> None:
        import ray

        try:
            ray.kill(handle, no_restart=True)
        except Exception as err:  # already gone is fine
            logger.debug("ray.kill on an env worker failed: %s", err)

    def close(self) -> None:
        import ray

        workers, self._workers = self._workers, []
        if workers and ray.is_initialized():
            try:
                ray.get([w.close.remote() for w in workers], timeout=30)
            except Exception as err:  # a dead worker has nothing left to close
                logger.debug("closing env workers: %s", err)
            for worker in workers:
                self._kill(worker)
        self._episodes = {}


def _task_key(task: Task) -> tuple[str, str, int, str]:
    return task.env, task.split, task.seed, task.task_id


def ensure_ray(num_cpus: int | None = None) -> None:
    """Start a local Ray runtime unless one is running (or connect to RAY_ADDRESS's cluster when set).

    Ray 2.60 turns token auth on by default for new local runtimes. The local runtime here is private to this
    machine's trainer, so we start it with auth off (RAY_AUTH_MODE=disabled) unless the user chose a mode;
    clusters are set up by the launcher, which decides auth there.
    """
    import ray

    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if os.environ.get("RAY_ADDRESS"):
        ray.init(**kwargs)
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=num_cpus, **kwargs)


def make_pool(kind: str, env_name: str, env_options: dict[str, Any] | None = None, **kwargs: Any) -> EnvPool:
    """Build an env pool: `ray` (actors, fault recovery) or `local` (in-process, for debugging)."""
    if kind == "ray":
        return RayEnvPool(env_name, env_options, **kwargs)
    if kind == "local":
        unknown = sorted(set(kwargs) - RAY_ONLY_OPTIONS)
        if unknown:
            raise ConfigError(f"unknown env pool options {unknown}; valid: {', '.join(sorted(RAY_ONLY_OPTIONS))}")
        return LocalEnvPool(env_name, env_options)  # Ray-only options (workers, restarts) do not apply in-process
    raise ConfigError(f"unknown env pool {kind!r}; valid env pools: {', '.join(POOL_KINDS)}")
