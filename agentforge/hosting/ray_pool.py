"""`RayEnvPool`: envs in Ray actors, one batched call per worker, and the recovery that makes a dead or hung worker
invisible to the run (replace it, replay its episodes, retry the call; `hosting/pool.py` tells the whole story)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentforge.cluster.ray_runtime import ensure_ray
from agentforge.envs.base import is_replayable
from agentforge.envs.replay import ReplayResult
from agentforge.errors import ConfigError, EnvWorkerError
from agentforge.hosting.host import EnvHost, _Failure
from agentforge.hosting.pool_base import (
    DEFAULT_STEP_RETRIES,
    DEFAULT_STEP_TIMEOUT_S,
    PROBE_GROUP,
    STEP_GROUP,
    WORKER_START_TIMEOUT_S,
    EnvPool,
    logger,
)
from agentforge.reliability.faultpoints import fault_point
from agentforge.types import Observation, StepResult, Task

if TYPE_CHECKING:  # Ray is imported only when a Ray pool is used
    import ray

@dataclass
class _StepInFlight:
    worker: int
    slot: int
    action: str
    since: float  # when it was submitted


class EnvCallTimeout(Exception):
    """An env call ran past `step_timeout_s`: its worker is treated as dead (killed, replaced, replayed)."""


def _dead_worker_errors() -> tuple[type[BaseException], ...]:
    from ray import exceptions as rex

    return rex.RayActorError, rex.WorkerCrashedError, rex.OutOfMemoryError


class RayEnvPool(EnvPool):
    """Envs in `num_workers` Ray actors; slot i lives on worker i % num_workers; one batched call per worker.

    A dead worker, or one whose env call ran past `step_timeout_s` (killed then), is replaced and its episodes
    replayed, then the failed call is retried; after `max_restarts` consecutive failures of one worker,
    EnvWorkerError names the env, the task seeds and the last failure. `step_timeout_s=None` waits forever.
    """

    def __init__(
        self,
        env_name: str,
        env_options: dict[str, Any] | None = None,
        num_workers: int = 2,
        max_restarts: int = 3,
        actor_options: dict[str, Any] | None = None,
        step_timeout_s: float | None = DEFAULT_STEP_TIMEOUT_S,
        step_retries: int = DEFAULT_STEP_RETRIES,
        step_latency: dict[str, Any] | None = None,
        step_threads: int = 1,
    ) -> None:
        if num_workers < 1:
            raise ConfigError(f"env pool num_workers must be >= 1, got {num_workers}")
        if max_restarts < 0:
            raise ConfigError(f"env pool max_restarts must be >= 0, got {max_restarts}")
        if step_threads < 1:
            raise ConfigError(f"env pool step_threads must be >= 1, got {step_threads}")
        if step_timeout_s is not None and step_timeout_s <= 0:
            raise ConfigError(f"env pool step_timeout_s must be > 0 seconds (or null: no timeout), "
                              f"got {step_timeout_s}")
        super().__init__(env_name, env_options, step_retries, step_latency)
        import ray

        from agentforge.reliability.reaper import start_reaper

        ensure_ray()  # joins the runtime the trainer started, if any
        start_reaper()  # if this process is SIGKILLed, what Ray started for it does not outlive it
        self.step_timeout_s = step_timeout_s
        self.num_workers = num_workers
        self.max_restarts = max_restarts
        # env actors mostly wait on the trainer: request no CPU so many fit beside the engine and learner
        self.actor_options = {"num_cpus": 0, **(actor_options or {}), "max_restarts": 0, "max_task_retries": 0}
        self.worker_restarts = [0] * num_workers
        self._consecutive_deaths = [0] * num_workers
        self.step_threads = step_threads
        self._actor_class = ray.remote(concurrency_groups={PROBE_GROUP: 1, STEP_GROUP: step_threads})(EnvHost)
        self._in_flight: dict[ray.ObjectRef, _StepInFlight] = {}  # per-episode steps, in submission order
        self._probed = [0.0] * num_workers  # when each worker was last asked what it runs (hung-step checks)
        self._workers = [self._new_worker() for _ in range(num_workers)]
        self._await_started(self._workers)

    @property
    def restarts(self) -> int:
        return self._counts["restarts"]

    def _new_worker(self) -> ray.actor.ActorHandle:
        return self._actor_class.options(**self.actor_options).remote(self.env_factory, self.env_options, True)

    def _await_started(self, workers: list[ray.actor.ActorHandle]) -> None:
        """Wait until new actors run (a process start and imports: seconds, more on a busy machine), so that the
        step timeout measures env calls only, never an actor's start-up."""
        import ray

        try:
            ray.get([worker.pid.remote() for worker in workers], timeout=WORKER_START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise EnvWorkerError(f"env {self.env_name!r}: {len(workers)} Ray env worker(s) did not start within "
                                 f"{WORKER_START_TIMEOUT_S:.0f} s; is the machine out of memory or processes? Ray's "
                                 f"logs are under /tmp/ray/session_latest/logs/") from None

    def worker_of(self, slot: int) -> int:
        return slot % self.num_workers

    # -- batched calls with recovery -----------------------------------------------------------------------------
    def _reset(self, items: list[tuple[int, Task]]) -> dict[int, Observation | _Failure]:
        # every worker is called, even with no slots, so it drops the envs of the previous round
        return self._call_all("reset", self._by_worker(items, every_worker=True))

    def _step(self, items: list[tuple[int, str]]) -> dict[int, StepResult | _Failure]:
        return self._call_all("step", self._by_worker(items, every_worker=False))

    def step(self, actions: dict[int, str]) -> dict[int, StepResult]:
        """With `step_threads` > 1, lockstep steps too go one call per slot (side by side on a worker's threads),
        through the per-episode path and its recovery; otherwise one batched call per worker."""
        if self.step_threads == 1:
            return super().step(actions)
        import ray

        self.submit_steps(actions)
        out: dict[int, StepResult] = {}
        while len(out) < len(actions):
            out.update(self.collect_steps())
            if len(out) < len(actions) and self._in_flight:
                ray.wait(list(self._in_flight), num_returns=1, timeout=self.poll_seconds)
        return out

    def _retry_step(self, items: list[tuple[int, tuple[Task, list[str], str]]]) -> dict[int, StepResult | _Failure]:
        return self._call_all("retry_step", self._by_worker(items, every_worker=False))

    def _reset_with_prefixes(
        self, items: list[tuple[int, tuple[Task, list[str]]]]
    ) -> dict[int, ReplayResult | _Failure]:
        return self._call_all("reset_with_prefixes", self._by_worker(items, every_worker=True))

    def _replay(self, items: list[tuple[int, tuple[Task, list[str], bool]]]) -> dict[int, ReplayResult | _Failure]:
        return self._call_all("replay", self._spread(items))

    # -- per-episode stepping: one call per slot, results as they return ------------------------------------------
    def submit_steps(self, actions: dict[int, str]) -> None:
        fault_point("env_step")
        self._check_steppable(actions)
        busy = sorted(slot for slot in actions if any(item.slot == slot for item in self._in_flight.values()))
        if busy:
            raise ValueError(f"slots {busy} already have a step in flight; collect it before stepping them again")
        for slot, action in sorted(actions.items()):
            self._submit_step(slot, action)

    def _submit_step(self, slot: int, action: str) -> None:
        w = self.worker_of(slot)
        ref = self._workers[w].step.options(concurrency_group=STEP_GROUP).remote([(slot, action)])
        self._in_flight[ref] = _StepInFlight(w, slot, action, time.monotonic())

    def collect_steps(self) -> dict[int, StepResult]:
        import ray

        out = super().collect_steps()
        if self._in_flight:
            refs = list(self._in_flight)
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            ready_set = set(ready)
            for ref in refs:  # submission order: a worker's results in the order it ran them
                if ref in ready_set and ref in self._in_flight:
                    self._collect_step(ref, out)
            self._check_hung_steps(out)
        return out

    def pending_steps(self) -> list[Any]:
        return list(self._in_flight)

    @property
    def steps_in_flight(self) -> int:
        return len(self._in_flight) + len(self._collected)

    @property
    def poll_seconds(self) -> float | None:
        return None if self.step_timeout_s is None else max(0.05, self.step_timeout_s / 4)

    def _forget_steps_in_flight(self) -> None:
        super()._forget_steps_in_flight()
        self._in_flight = {}  # a new round: what the last one left running belongs to envs about to be replaced

    def _collect_step(self, ref: ray.ObjectRef, out: dict[int, StepResult]) -> None:
        import ray

        item = self._in_flight.pop(ref)
        try:
            (result,) = ray.get(ref)
        except _dead_worker_errors() as err:
            self._recover_steps(item.worker, err, out, failed=[item])
            return
        self._consecutive_deaths[item.worker] = 0
        self._apply_step(item, result, out)

    def _apply_step(self, item: _StepInFlight, result: StepResult | _Failure, out: dict[int, StepResult]) -> None:
        if isinstance(result, _Failure):
            result = self._retried({item.slot: result}, {item.slot: item.action})[item.slot]
            if isinstance(result, _Failure):
                self._raise_step_failure(item.slot, item.action, result)
        out[item.slot] = self._record_step(item.slot, item.action, result)

    def _recover_steps(self, w: int, err: BaseException, out: dict[int, StepResult],
                       failed: list[_StepInFlight]) -> None:
        """Worker `w` died (or hung): steps it finished before are applied first (the restored episodes must include
        them), then it is replaced, its episodes replayed, and every step it had not finished submitted again."""
        import ray

        mine = [(ref, item) for ref, item in self._in_flight.items() if item.worker == w]
        ready = set(ray.wait([r for r, _ in mine], num_returns=len(mine), timeout=0)[0]) if mine else set()
        again = list(failed)
        for ref, item in mine:
            del self._in_flight[ref]
            if ref in ready:
                try:
                    (result,) = ray.get(ref)
                except _dead_worker_errors():
                    again.append(item)
                    continue
                self._apply_step(item, result, out)
            else:
                again.append(item)
        self._replace_worker(w, err)
        for item in again:
            self._submit_step(item.slot, item.action)

    def _check_hung_steps(self, out: dict[int, StepResult]) -> None:
        """A worker whose oldest step in flight is older than `step_timeout_s` is asked what it runs; an env call
        running past the timeout counts as a dead worker (as in lockstep play)."""
        import ray

        if self.step_timeout_s is None or not self._in_flight:
            return
        now = time.monotonic()
        oldest: dict[int, float] = {}
        for item in self._in_flight.values():
            oldest[item.worker] = min(oldest.get(item.worker, item.since), item.since)
        for w, since in sorted(oldest.items()):
            if now - since < self.step_timeout_s or now - self._probed[w] < self.step_timeout_s / 4:
                continue
            self._probed[w] = now
            probe = self._workers[w].probe.options(concurrency_group=PROBE_GROUP).remote()
            try:
                busy = ray.get(probe, timeout=self.step_timeout_s)
            except ray.exceptions.GetTimeoutError:
                error = EnvCallTimeout(self._timeout_message(w, None, None))
            except _dead_worker_errors() as err:
                self._recover_steps(w, err, out, failed=[])
                continue
            else:
                if busy is None or busy[2] < self.step_timeout_s:
                    continue
                error = EnvCallTimeout(self._timeout_message(w, (busy[0], busy[1]), busy[2]))
            self._recover_steps(w, error, out, failed=[])

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

        while True:
            try:
                result = self._get(w, ref)
            except (*_dead_worker_errors(), EnvCallTimeout) as err:
                self._replace_worker(w, err)
                ref = getattr(self._workers[w], method).remote(payload)
                continue
            self._consecutive_deaths[w] = 0
            return result

    def _get(self, w: int, ref: ray.ObjectRef) -> Any:
        """`ray.get`, but an env call running past `step_timeout_s` raises EnvCallTimeout (the caller kills the
        worker). Waits the timeout, then asks the worker's probe thread what runs and for how long: no polling."""
        import ray

        if self.step_timeout_s is None:
            return ray.get(ref)
        wait = self.step_timeout_s
        while True:
            ready, _ = ray.wait([ref], timeout=wait)
            if ready:
                return ray.get(ref)
            probe = self._workers[w].probe.options(concurrency_group=PROBE_GROUP).remote()
            try:
                busy = ray.get(probe, timeout=self.step_timeout_s)
            except ray.exceptions.GetTimeoutError:
                raise EnvCallTimeout(self._timeout_message(w, None, None)) from None
            if busy is None:  # between env calls (shipping results): keep waiting
                wait = self.step_timeout_s
                continue
            method, slot, seconds = busy
            if seconds >= self.step_timeout_s:
                raise EnvCallTimeout(self._timeout_message(w, (method, slot), seconds))
            wait = self.step_timeout_s - seconds + 0.05

    def _timeout_message(self, w: int, call: tuple[str, int] | None, seconds: float | None) -> str:
        self._counts["timeouts"] += 1
        if call is None:
            return (f"env worker {w} ({self.env_name}) did not answer within env_pool.step_timeout_s="
                    f"{self.step_timeout_s:g} s, not even its probe (an env holding the GIL in native code)")
        method, slot = call
        episode = self._episodes.get(slot)
        task = f" ({episode.task.describe()})" if episode is not None and method != "replay" else ""
        return (f"env {self.env_name!r} {method} on slot {slot}{task} ran {seconds:.1f} s, over "
                f"env_pool.step_timeout_s={self.step_timeout_s:g}")

    def _replace_worker(self, w: int, err: BaseException) -> None:
        """Start a new actor for worker `w` and replay its episodes; repeated deaths raise EnvWorkerError."""

        while True:
            if self._consecutive_deaths[w] >= self.max_restarts:
                self._kill(self._workers[w])  # it may still be hung: closing must not wait for it
                raise self._worker_error(w, err) from err
            self._consecutive_deaths[w] += 1
            self._counts["restarts"] += 1
            self.worker_restarts[w] += 1
            episodes = [(slot, ep.task, list(ep.actions)) for slot, ep in sorted(self._episodes.items())
                        if self.worker_of(slot) == w]
            steps = sum(len(a) for _, _, a in episodes)
            self._counts["replayed_episodes"] += len(episodes)
            self._counts["replayed_steps"] += steps
            what = "hung" if isinstance(err, EnvCallTimeout) else "died"
            logger.warning(
                "env worker %d (%s) %s: %s; restart %d/%d, replaying %d episodes (%d steps)",
                w, self.env_name, what, str(err) if what == "hung" else type(err).__name__,
                self._consecutive_deaths[w], self.max_restarts, len(episodes), steps,
            )
            if episodes and not is_replayable(self.env_factory):
                logger.warning("env %s declares replayable = False: its restored episodes may not be where they "
                               "were before the crash", self.env_name)
            self._kill(self._workers[w])
            self._workers[w] = self._new_worker()
            try:
                self._await_started([self._workers[w]])
                self._get(w, self._workers[w].restore.remote(episodes))
                return
            except (*_dead_worker_errors(), EnvCallTimeout) as replay_err:
                err = replay_err

    def _worker_error(self, w: int, err: BaseException) -> EnvWorkerError:
        seeds = sorted({ep.task.seed for slot, ep in self._episodes.items() if self.worker_of(slot) == w})
        return EnvWorkerError(
            f"env {self.env_name!r} worker {w} died or hung {self._consecutive_deaths[w] + 1} times in a row "
            f"(max_restarts={self.max_restarts}) while hosting tasks with seeds {seeds}; last error: "
            f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}. To debug, run "
            f"the same tasks in-process with env_pool=local (a crash then happens in the driver, with its "
            f"traceback), or read the Ray worker logs under /tmp/ray/session_latest/logs/."
        )

    # -- fault injection and shutdown ----------------------------------------------------------------------------
    def kill_worker(self, i: int) -> None:
        """Kill worker i's process (fault-injection tests) and wait until it is gone: `ray.kill` only asks Ray to,
        and on a busy machine the next calls could finish before it lands. The next call restarts and replays."""
        import psutil
        import ray

        try:
            pid = ray.get(self._workers[i].pid.remote(), timeout=30)
        except Exception:  # already dead
            pid = None
        self._kill(self._workers[i])
        if pid is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.wait_procs([psutil.Process(pid)], timeout=30)

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


def _task_key(task: Task) -> tuple[str, str, int, str, str]:
    return task.env, task.split, task.seed, task.task_id, repr(task.options)
