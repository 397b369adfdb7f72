"""Requests of all live sessions batched into the engine together.

HTTP handlers submit (session, prompt ids, sampling) and wait on a future; one thread drains the queue: once a
request is waiting it keeps gathering while requests keep arriving (each within `window_s` of the last, at most
`MAX_WAIT_WINDOWS` windows in all), and fires at once when every live session is waiting (no further request can
come). On a CPU a call of 1 prompt costs nearly as much as one of 16: fragmenting calls is what costs. Requests with
equal sampling settings share one generate call. The algorithm's rollout hooks act on every call as on an env turn:
its decoding intervention (unless the call brings its own: `tool_choice` required or named forces the
tool call's opening), and its review (a rejected reply is generated again from the same prompt and kept as a
NOT_TRAINED span, as in the multi-turn workflow). `agentforge serve`'s prompt scoring (`echo` with `max_tokens=0`:
an endpoint teacher's log-probs) goes through the same thread, as one `engine.score` call per batch: the engine is
called from one thread only.

A failing generate call fails only the requests that caused it: the calls of a failed batch are generated again one
by one, so another session's valid request batched with a bad one still gets its reply.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from agentforge.engines.interventions import InterventionSpec
from agentforge.errors import AgentforgeError
from agentforge.gateway.sessions import Session
from agentforge.rollout.hooks import RolloutHooks
from agentforge.rollout.turns import generate_reviewed
from agentforge.rollout.workflow import RolloutContext
from agentforge.types import Completion, SamplingConfig

log = logging.getLogger("agentforge.gateway")
MAX_WAIT_WINDOWS = 20  # the longest a waiting request is held for others: this many windows


@dataclass
class PendingCall:
    session: Session
    prompt_ids: list[int]
    sampling: SamplingConfig
    forced: InterventionSpec | None = None  # this call's own intervention (tool_choice), over the algorithm's
    future: Future = field(default_factory=Future)
    score: bool = False  # score the prompt's tokens (each given the ones before it) instead of generating


def sampling_key(sampling: SamplingConfig) -> tuple:
    return (sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_new_tokens, tuple(sampling.stop),
            sampling.presence_penalty, sampling.repetition_penalty, sampling.uncertainty)


class GenerationBatcher:
    """One thread between the HTTP handlers and the engine. `context()` is the rollout context of the run being
    played (train or eval: its engine, sampling and stats); `live()` how many sessions can still send requests."""

    def __init__(self, context: Callable[[], RolloutContext], hooks: RolloutHooks, live: Callable[[], int],
                 window_s: float) -> None:
        self.context, self.hooks, self.live, self.window_s = context, hooks, live, float(window_s)
        self._queue: list[PendingCall] = []
        self._cond = threading.Condition()
        self._closed = False
        self._last_arrival = 0.0
        self._thread = threading.Thread(target=self._loop, name="agentforge-gateway-batcher", daemon=True)
        self._thread.start()

    def submit(self, session: Session, prompt_ids: list[int], sampling: SamplingConfig,
               forced: InterventionSpec | None = None) -> Future:
        return self._enqueue(PendingCall(session, prompt_ids, sampling, forced))

    def submit_score(self, session: Session, prompt_ids: list[int]) -> Future:
        """The raw log-prob of each prompt token after the first, given the tokens before it (a list of floats)."""
        return self._enqueue(PendingCall(session, prompt_ids, SamplingConfig(max_new_tokens=1), score=True))

    def _enqueue(self, call: PendingCall) -> Future:
        with self._cond:
            if self._closed:
                raise AgentforgeError("the gateway is closed")
            self._queue.append(call)
            self._last_arrival = time.monotonic()
            self._cond.notify_all()
        return call.future

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=10)

    def _take(self) -> list[PendingCall] | None:
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            give_up = time.monotonic() + MAX_WAIT_WINDOWS * self.window_s
            while len(self._queue) < self.live() and not self._closed:
                now = time.monotonic()
                left = min(self._last_arrival + self.window_s, give_up) - now
                if left <= 0:
                    break
                self._cond.wait(left)
            batch, self._queue = self._queue, []
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                for call in self._queue:
                    call.future.set_exception(AgentforgeError("the gateway closed before this call was generated"))
                return
            groups: dict[tuple, list[PendingCall]] = {}
            for call in batch:
                groups.setdefault(("score",) if call.score else sampling_key(call.sampling), []).append(call)
            for calls in groups.values():
                self._run(calls)

    def _run(self, calls: list[PendingCall]) -> None:
        """Generate `calls` together; if that fails, each alone (only a failing call's own future fails)."""
        try:
            completions = self._score(calls) if calls[0].score else self._generate_reviewed(calls)
        except BaseException as exc:  # noqa: BLE001  (the handlers report it; the loop goes on)
            if len(calls) > 1:
                log.warning("gateway: a generate call of %d requests failed (%s: %s); generating them one by one",
                            len(calls), type(exc).__name__, exc)
                for call in calls:
                    self._run([call])
                return
            log.exception("gateway: a generate call failed")
            calls[0].future.set_exception(exc)
            return
        for call, completion in zip(calls, completions, strict=True):
            call.future.set_result(completion)

    def _score(self, calls: list[PendingCall]) -> list[list[float]]:
        engine = self.context().engine
        return engine.score([c.prompt_ids[:1] for c in calls], [c.prompt_ids[1:] for c in calls])

    def _generate_reviewed(self, calls: list[PendingCall]) -> list[Completion]:
        episodes = [c.session.episode for c in calls]
        return generate_reviewed(self.hooks, self.context(), episodes, [c.prompt_ids for c in calls],
                                 calls[0].sampling, [len(e.trajectory.turns) for e in episodes],
                                 overrides=[c.forced for c in calls])
