"""The env pool's interface and what every pool shares: episodes by slot, each slot's action log (what replays a
lost episode), retried env steps, fault counts; and `LocalEnvPool`, every env in this process.

`agentforge.hosting.pool` is the face (`make_pool`, both pools); the Ray-hosted pool is `hosting/ray_pool.py`.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentforge.envs.base import ENVS, Env
from agentforge.envs.replay import ReplayResult, checked_actions
from agentforge.errors import ConfigError
from agentforge.hosting.host import EnvHost, _Failure
from agentforge.hosting.latency import LatencyEnvFactory, StepLatency
from agentforge.reliability.faultpoints import fault_point
from agentforge.types import Observation, StepResult, Task

logger = logging.getLogger("agentforge.envs")

POOL_KINDS = ("ray", "local")
RAY_ONLY_OPTIONS = {"num_workers", "max_restarts", "actor_options", "step_timeout_s", "step_threads"}
POOL_OPTIONS = {"step_retries", "step_latency"}  # both pools
# one env call (a step, a reset, a reset plus the replay of one episode's actions); the slowest normal one is a
# ScienceWorld JVM start plus task load, ~5 s here (~20 s on a loaded machine)
DEFAULT_STEP_TIMEOUT_S = 120.0
DEFAULT_STEP_RETRIES = 2
WORKER_START_TIMEOUT_S = 300.0  # a new env actor's process start, not an env call
PROBE_GROUP = "probe"  # the actor's second thread, answering `probe` while an env call runs (or hangs)
STEP_GROUP = "steps"  # `env_pool.step_threads` > 1: per-slot steps of one worker run side by side on these threads


def resolve_env(env_name: str) -> Callable[..., Env]:
    """The env class for a registered name or `pkg.mod:Class`; fails early, in the driver, on a bad name."""
    import agentforge.envs  # noqa: F401  (registers the built-in envs)

    return ENVS.get(env_name)


# -- the pools ------------------------------------------------------------------------------------------------------
FAULT_COUNTS = ("restarts", "timeouts", "replayed_episodes", "replayed_steps", "step_retries")


@dataclass
class _Episode:
    task: Task
    actions: list[str] = field(default_factory=list)
    done: bool = False


class EnvPool(ABC):
    """Episodes by slot: `reset(tasks)` starts slot i on tasks[i]; `step({slot: action})` steps active slots."""

    def __init__(self, env_name: str, env_options: dict[str, Any] | None = None,
                 step_retries: int = DEFAULT_STEP_RETRIES, step_latency: dict[str, Any] | None = None) -> None:
        if step_retries < 0:
            raise ConfigError(f"env pool step_retries must be >= 0, got {step_retries}")
        self.env_name = env_name
        self.env_options = dict(env_options or {})
        self.env_factory: Callable[..., Env] = resolve_env(env_name)
        self.step_latency = StepLatency.from_options(step_latency)
        if self.step_latency is not None:  # benchmarks and scheduler tests: heavy-tailed env steps, reproducible
            self.env_factory = LatencyEnvFactory(self.env_factory, self.step_latency)
        self.step_retries = step_retries
        self._episodes: dict[int, _Episode] = {}
        self._collected: dict[int, StepResult] = {}  # per-episode stepping: results not yet collected
        self._counts = dict.fromkeys(FAULT_COUNTS, 0)
        self._taken = dict(self._counts)

    def fault_counts(self) -> dict[str, int]:
        """Faults survived since the pool started: worker restarts (deaths and timeouts), timeouts, episodes and
        steps replayed to rebuild restarted workers, env steps retried on a fresh env after the env raised."""
        return dict(self._counts)

    def take_fault_counts(self) -> dict[str, int]:
        """The counts since the previous call (what the trainer logs per iteration as `env/*`)."""
        now = self.fault_counts()
        delta = {key: now[key] - self._taken[key] for key in now}
        self._taken = now
        return delta

    @property
    def active_slots(self) -> list[int]:
        return [slot for slot, ep in self._episodes.items() if not ep.done]

    def reset(self, tasks: list[Task], prefixes: Sequence[Sequence[str]] | None = None) -> list[Observation]:
        """Start slot i on tasks[i]; with `prefixes`, replay prefixes[i] on it too and return the observation after it
        (see `reset_with_prefixes`)."""
        fault_point("env_reset")  # reliability tests kill the whole run here, as a rollout starts
        if prefixes is not None:
            return [result.observation for result in self.reset_with_prefixes(tasks, prefixes)]
        self._forget_steps_in_flight()
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
        self._forget_steps_in_flight()
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
        """Step these slots, all at once, and return when every one has its result (lockstep play)."""
        fault_point("env_step")  # reliability tests kill the whole run here, mid-rollout
        self._check_steppable(actions)
        results = self._retried(self._step(sorted(actions.items())), actions)
        out: dict[int, StepResult] = {}
        for slot, result in results.items():
            if not isinstance(result, _Failure):
                out[slot] = self._record_step(slot, actions[slot], result)
        failure = next(((slot, r) for slot, r in results.items() if isinstance(r, _Failure)), None)
        if failure is not None:
            self._raise_step_failure(failure[0], actions[failure[0]], failure[1])
        return out

    # -- per-episode stepping: each slot's result as soon as its own step returns ---------------------------------
    def submit_steps(self, actions: dict[int, str]) -> None:
        """Start stepping these slots; `collect_steps` hands back each result once its own step has returned.
        In-process the steps run now; a Ray pool sends each slot its own call, so a slow env step holds back only
        its own episode. Faults are handled as in `step` (restart and replay, retry on a fresh env)."""
        self._collected.update(self.step(actions))

    def collect_steps(self) -> dict[int, StepResult]:
        """The results of submitted steps that have returned since the last call (never blocks)."""
        out, self._collected = self._collected, {}
        return out

    def pending_steps(self) -> list[Any]:
        """What a caller may wait on for the next submitted step to return (Ray object refs; none in-process)."""
        return []

    @property
    def steps_in_flight(self) -> int:
        """Submitted steps not yet collected."""
        return len(self._collected)

    @property
    def poll_seconds(self) -> float | None:
        """How long a caller waiting on `pending_steps` may sleep before calling `collect_steps` again (so a hung
        env is noticed); None: as long as it likes."""
        return None

    def _forget_steps_in_flight(self) -> None:
        self._collected = {}

    # -- shared step bookkeeping ----------------------------------------------------------------------------------
    def _check_steppable(self, actions: dict[int, str]) -> None:
        for slot in actions:
            episode = self._episodes.get(slot)
            if episode is None:
                last = len(self._episodes) - 1
                raise ValueError(f"slot {slot} has no episode: the last reset started slots 0..{last}")
            if episode.done:
                raise ValueError(f"slot {slot}'s episode ({episode.task.describe()}) is done; reset before stepping it")

    def _retried(self, results: dict[int, StepResult | _Failure],
                 actions: dict[int, str]) -> dict[int, StepResult | _Failure]:
        """Steps whose env raised, retried on a fresh env with the episode replayed, `step_retries` times."""
        failed = sorted(slot for slot, result in results.items() if isinstance(result, _Failure))
        for attempt in range(self.step_retries):
            if not failed:
                break
            self._counts["step_retries"] += len(failed)
            logger.warning("env %s raised on slots %s; retrying on a fresh env with the episode replayed (%d/%d)",
                           self.env_name, failed, attempt + 1, self.step_retries)
            retried = self._retry_step([(slot, (self._episodes[slot].task, list(self._episodes[slot].actions),
                                                actions[slot])) for slot in failed])
            results.update(retried)
            failed = sorted(slot for slot in failed if isinstance(results[slot], _Failure))
        return results

    def _record_step(self, slot: int, action: str, result: StepResult) -> StepResult:
        episode = self._episodes[slot]
        episode.actions.append(action)
        episode.done = result.done
        return result

    def _raise_step_failure(self, slot: int, action: str, fail: _Failure) -> None:
        self._episodes[slot].done = True  # its env's state is unknown now; the slot is out until the next reset
        _raise_env_failure(fail, f"env {self.env_name!r} raised while stepping slot {slot} "
                                 f"({self._episodes[slot].task.describe()}) with action {action!r}, "
                                 f"{1 + self.step_retries} times (each retry on a fresh env with the episode "
                                 f"replayed; env_pool.step_retries={self.step_retries})")

    @abstractmethod
    def _reset(self, items: list[tuple[int, Task]]) -> dict[int, Observation | _Failure]: ...

    @abstractmethod
    def _step(self, items: list[tuple[int, str]]) -> dict[int, StepResult | _Failure]: ...

    @abstractmethod
    def _retry_step(self, items: list[tuple[int, tuple[Task, list[str], str]]]) -> dict[int, StepResult | _Failure]: ...

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

    def __init__(self, env_name: str, env_options: dict[str, Any] | None = None,
                 step_retries: int = DEFAULT_STEP_RETRIES, step_latency: dict[str, Any] | None = None) -> None:
        super().__init__(env_name, env_options, step_retries, step_latency)
        self._host = EnvHost(self.env_factory, self.env_options)

    def _reset(self, items: list[tuple[int, Task]]) -> dict[int, Observation | _Failure]:
        return dict(zip([s for s, _ in items], self._host.reset(items), strict=True))

    def _step(self, items: list[tuple[int, str]]) -> dict[int, StepResult | _Failure]:
        return dict(zip([s for s, _ in items], self._host.step(items), strict=True))

    def _retry_step(self, items: list[tuple[int, tuple[Task, list[str], str]]]) -> dict[int, StepResult | _Failure]:
        return dict(zip([s for s, _ in items], self._host.retry_step(items), strict=True))

    def _reset_with_prefixes(
        self, items: list[tuple[int, tuple[Task, list[str]]]]
    ) -> dict[int, ReplayResult | _Failure]:
        return dict(zip([s for s, _ in items], self._host.reset_with_prefixes(items), strict=True))

    def _replay(self, items: list[tuple[int, tuple[Task, list[str], bool]]]) -> dict[int, ReplayResult | _Failure]:
        return dict(zip([i for i, _ in items], self._host.replay(items), strict=True))

    def close(self) -> None:
        self._host.close()
