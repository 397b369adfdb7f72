"""Asynchronous training (`trainer.asynchronous.max_staleness: k` ≥ 1): rollout never waits for the learner.

A producer thread plays batch after batch (one batch = one iteration's groups) on the engine replicas while the
learner trains on earlier batches. Each weight push reaches the replicas between their generate calls (so also in
the middle of an episode: partial rollouts), and every turn records the version that sampled it
(`turn.info["policy_version"]`, made absolute here: the learner's weight version, one per push of new weights; an
update the learner refuses pushes nothing and makes no version, `training/updates.py`). With
`engine.interrupt_tokens` a push also lands inside a generate call (`engines/replicas/interruptible.py`); a turn that
spans versions lists them (`policy_version_switches`) and counts as its oldest for the bound.

The bound (AReaL's): batch b (0-based) may start only once the learner has finished b − k iterations, so at most
k pushes (one per iteration at most) separate the weights that sampled any turn of batch b from those that train
it: at most k versions old, refused updates or not. A group holding a turn older than that (only possible after a
fault) is dropped and counted, never trained silently.

Evaluation and checkpoints pause the producer between batches (`paused()`); a checkpoint keeps the batches played
and not yet trained, so a resumed run loses no complete group and trains each of them at the version it would have
(the bound holds across a resume). Resumed with `max_staleness: 0`, the kept batches are still trained first, with a
warning naming them: their tasks were drawn already, and playing new ones instead would skip those for good.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agentforge.errors import AgentforgeError
from agentforge.types import Group

log = logging.getLogger("agentforge.training.asynchronous")


@dataclass
class PlayedBatch:
    """One iteration's rollout, played ahead: what `Trainer.play` returns, and when it ran."""

    iteration: int
    result: Any
    played: list[Group]
    dynamic_metrics: dict[str, float]
    seconds: float
    finished_at: float = field(default_factory=time.monotonic)


class RolloutProducer:
    """Plays batches `first`, `first + 1`, ... in a thread, at most `max_staleness` ahead of the learner.

    `play(iteration)` is the trainer's own rollout of one iteration; `to_absolute(version)` turns an engine's push
    counter into the learner's weight version that sampled a turn.
    """

    def __init__(self, play: Callable[[int], tuple[Any, list[Group], dict[str, float]]], first: int, last: int,
                 max_staleness: int, to_absolute: Callable[[int], int],
                 pending: list[PlayedBatch] | None = None) -> None:
        self._play, self.last, self.k, self.to_absolute = play, last, int(max_staleness), to_absolute
        self.trained = first  # iterations the learner has finished (updated or refused): what gates the next batch
        self.ready: dict[int, PlayedBatch] = {b.iteration: b for b in pending or []}
        self.next = max([first - 1, *self.ready]) + 1  # the next batch to play
        self._cond = threading.Condition()
        self._pause_requests = 0
        self._busy = False
        self._stop = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="agentforge-rollout-producer", daemon=True)

    # ------------------------------------------------------------------------------------------ the thread
    def start(self) -> RolloutProducer:
        self._thread.start()
        return self

    def _may_start(self) -> bool:
        return (not self._pause_requests and self.next < self.last and self.next <= self.trained + self.k)

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._stop or self._may_start())
                    if self._stop:
                        return
                    iteration, self._busy = self.next, True
                started = time.perf_counter()
                try:
                    result, played, dynamic = self._play(iteration)
                    for group in played:  # the learner version behind each turn, absolute (survives a resume)
                        for trajectory in group.trajectories:
                            for turn in trajectory.turns:
                                if "policy_version" in turn.info and "learner_version" not in turn.info:
                                    turn.info["learner_version"] = self.to_absolute(int(turn.info["policy_version"]))
                                    if turn.info.get("policy_version_switches"):
                                        turn.info["learner_version_switches"] = [
                                            [at, self.to_absolute(int(v))]
                                            for at, v in turn.info["policy_version_switches"]]
                finally:
                    with self._cond:
                        self._busy = False
                        self._cond.notify_all()
                with self._cond:
                    self.ready[iteration] = PlayedBatch(iteration, result, played, dynamic,
                                                        time.perf_counter() - started)
                    self.next = iteration + 1
                    self._cond.notify_all()
        except BaseException as error:  # handed to the learner's thread, which raises it
            log.exception("the rollout producer stopped")
            with self._cond:
                self._error = error
                self._cond.notify_all()

    # ------------------------------------------------------------------------------------------ the learner's side
    def take(self, iteration: int) -> tuple[PlayedBatch, float]:
        """Batch `iteration` (waiting for it) and how long the learner waited."""
        started = time.perf_counter()
        with self._cond:
            self._cond.wait_for(lambda: iteration in self.ready or self._error is not None)
            if iteration not in self.ready:
                raise AgentforgeError(f"the rollout of iteration {iteration + 1} failed in the producer thread: "
                                      f"{type(self._error).__name__}: {self._error}") from self._error
            return self.ready.pop(iteration), time.perf_counter() - started

    def updated(self, iterations: int) -> None:
        """The learner finished `iterations` iterations (each pushed its update or refused it): batches up to
        `iterations + k` may start."""
        with self._cond:
            self.trained = iterations
            self._cond.notify_all()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No batch runs inside the block (evaluation, checkpoints use the engine and the env pool)."""
        with self._cond:
            self._pause_requests += 1
            self._cond.wait_for(lambda: not self._busy or self._error is not None)
        try:
            yield
        finally:
            with self._cond:
                self._pause_requests -= 1
                self._cond.notify_all()

    def pending(self) -> list[PlayedBatch]:
        """Batches played and not yet trained (call while paused: what a checkpoint keeps)."""
        with self._cond:
            return [self.ready[i] for i in sorted(self.ready)]

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=60)  # a batch in flight: the engine closes under it (a daemon thread)


def token_lags(turn: Any, version: int) -> list[int]:
    """The version lag of each response token of `turn` (a push inside the response makes its later tokens newer)."""
    n = len(turn.response_ids)
    lags = [version - int(turn.info.get("learner_version", version))] * n
    for at, sampled_by in turn.info.get("learner_version_switches") or []:
        lags[int(at):] = [version - int(sampled_by)] * (n - int(at))
    return lags


def oldest_lag(groups: list[Group], version: int) -> int:
    """The largest version lag of any turn of `groups` against learner `version` (0 for none)."""
    return max([version - int(turn.info.get("learner_version", version)) for group in groups
                for trajectory in group.trajectories for turn in trajectory.turns] + [0])


def staleness(groups: list[Group], version: int, max_staleness: int) -> tuple[list[Group], dict[str, float]]:
    """The groups that may be trained by learner `version` (every turn at most `max_staleness` versions old) and
    the staleness metrics: mean and max lag of the trained turns (a turn counts as its oldest token), the mean lag
    per token, turns per lag, turns spanning versions, groups dropped."""
    kept, dropped, lags, spanning, tokens = [], 0, [], 0, []
    for group in groups:
        group_lags = [version - int(turn.info.get("learner_version", version))
                      for trajectory in group.trajectories for turn in trajectory.turns]
        if any(lag > max_staleness for lag in group_lags):
            dropped += 1
            continue
        kept.append(group)
        lags += group_lags
        for trajectory in group.trajectories:
            for turn in trajectory.turns:
                spanning += bool(turn.info.get("policy_version_switches"))
                tokens += token_lags(turn, version)
    metrics = {"async/staleness_mean": sum(lags) / len(lags) if lags else 0.0,
               "async/staleness_max": float(max(lags, default=0)), "async/dropped_groups": float(dropped),
               "async/turns_spanning_versions": float(spanning),
               "async/token_staleness_mean": sum(tokens) / len(tokens) if tokens else 0.0}
    for lag in range(max_staleness + 1):
        metrics[f"async/turns_lag_{lag}"] = float(sum(1 for x in lags if x == lag))
    return kept, metrics


def lag_metrics(samples: list[Any], owners: list[Any], version: int) -> dict[str, float]:
    """The behaviour → proximal mismatch per version lag (after `Learner.prepare` with recomputed old log-probs):
    k3, mean |Δ log p| and the IS weight's mean and max of the turns sampled `lag` versions ago."""
    from agentforge.objective.correction import mismatch_metrics

    by_lag: dict[int, tuple[list[Any], list[Any], list[Any]]] = {}
    for sample, owner in zip(samples, owners, strict=True):
        info = getattr(owner, "info", None) or {}
        if sample.rollout_logprobs is None or "learner_version" not in info:
            continue
        learner, engine, masks = by_lag.setdefault(version - int(info["learner_version"]), ([], [], []))
        learner.append(sample.old_logprobs)
        engine.append(sample.rollout_logprobs)
        masks.append(sample.loss_mask)
    out: dict[str, float] = {}
    for lag, (learner, engine, masks) in sorted(by_lag.items()):
        for key, value in mismatch_metrics(learner, engine, masks).items():
            out[f"async/lag_{lag}/{key.split('/', 1)[1]}"] = value
    return out


def mark_lags(samples: list[Any], owners: list[Any], version: int) -> None:
    """Each sample's `stratum` = its turn's version lag, so the learner counts its clipped tokens per lag."""
    for sample, owner in zip(samples, owners, strict=True):
        info = getattr(owner, "info", None) or {}
        if "learner_version" in info:
            sample.stratum = max(0, version - int(info["learner_version"]))


def lag_clip_fractions(learner_metrics: dict[str, float]) -> dict[str, float]:
    """The learner's per-stratum clip counts (removed from `learner_metrics`) as `async/lag_<n>/clip_fraction`
    (over every optimizer step of the update) and `async/lag_<n>/trained_tokens`."""
    out: dict[str, float] = {}
    prefix = "count/tokens_stratum_"
    for key in [k for k in learner_metrics if k.startswith(prefix)]:
        lag = key[len(prefix):]
        tokens = learner_metrics.pop(key)
        clipped = learner_metrics.pop(f"count/clipped_stratum_{lag}", 0.0)
        out[f"async/lag_{lag}/clip_fraction"] = clipped / tokens if tokens else 0.0
        out[f"async/lag_{lag}/trained_tokens"] = tokens
    return out
