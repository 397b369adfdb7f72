"""Per-episode scheduling (`agent.schedule=per_episode`): an episode's next turn is generated as soon as its own env
step returns, never at a per-turn barrier.

Lockstep play waits, every turn, for the slowest generation and the slowest env step of all active episodes. Here
each episode moves on its own: its turn goes to its engine lane (a replica; an in-process engine is one lane) with
whatever other episodes are ready for that lane when it is free (continuous batching across episodes), and its env
step goes to the pool as its own call (`EnvPool.submit_steps`), coming back when that step is done. The driver only
waits when nothing is ready: on the first replica call or env step to return.

`RolloutHooks` contracts hold per episode: `plan` and `before_first_turn` run once before any turn, as in lockstep;
`turn_intervention` is asked for each episode's turn when it is submitted; `review_turns` sees the turns of one
returned generate call that share an attempt number (a rejected turn goes back to its lane with the same prompt);
`after_episodes` runs once when every episode has ended.

Determinism: the event order, and so which episodes share a generate call (and in which order they draw from the
engine's sampling stream), is fixed when every env step returns at once, i.e. `env_pool.kind=local` with one lane;
then a fixed seed reproduces the run exactly. With a Ray pool or several replicas, which episodes share a call
depends on which steps returned first: runs with the same seed then play equally distributed episodes, not identical
tokens. `agent.schedule=lockstep` (the default) reproduces a run with any pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentforge.agent.parsing import ParsedResponse
from agentforge.errors import AgentforgeError
from agentforge.rollout.lanes import GenerationJob, lanes_for
from agentforge.rollout.turns import parse_turn, record_turn
from agentforge.rollout.workflow import Episode, RolloutContext
from agentforge.types import Completion, LossRole, Span

SCHEDULES = ("lockstep", "per_episode")


@dataclass
class _TurnInProgress:
    episode: Episode
    step: int  # the generated turn's index, 1-based
    prompt: list[int]
    attempt: int = 0
    since: float = field(default_factory=time.monotonic)  # ready since


class PerEpisodeScheduler:
    """Plays `episodes` (reset, `before_first_turn` done) to the end; `run` returns how many finished."""

    def __init__(self, hooks: Any, ctx: RolloutContext, episodes: list[Episode],
                 on_progress: Callable[..., None] | None = None) -> None:
        self.hooks, self.ctx, self.episodes, self.on_progress = hooks, ctx, episodes, on_progress
        self.lanes = lanes_for(ctx.engine)
        self.limit = int(hooks.max_turn_attempts)
        self.ready: list[_TurnInProgress] = []
        self.jobs: dict[int, GenerationJob] = {}  # lane -> its call in flight
        self.turns: dict[int, list[_TurnInProgress]] = {}  # lane -> the turns of that call
        self.at_env: dict[int, tuple[_TurnInProgress, Completion, ParsedResponse]] = {}  # slot -> its env step
        self.finished = 0
        self.straggler_wait = float(ctx.config.straggler_wait)
        self.call_seconds: dict[int, float] = {}  # lane -> how long its last generate call took

    def run(self) -> int:
        self.ctx.stats.overlapped = True
        self.ready = [self._turn(e, 1) for e in self.episodes if not e.done]
        while self.ready or self.jobs or self.at_env:
            self._dispatch()
            progressed = self._collect_generations()
            progressed = self._collect_env_steps() or progressed
            if not progressed:
                self._wait()
        return self.finished

    # ------------------------------------------------------------------------------------------------ engine
    def _turn(self, episode: Episode, step: int) -> _TurnInProgress:
        return _TurnInProgress(episode, step, self.ctx.render(episode, step))

    def _dispatch(self) -> None:
        """A free lane gets one call with all the turns ready for it (in slot order), once every episode of the lane
        that can still come is ready (none is at its env step), or when the oldest ready turn has waited
        `agent.straggler_wait` times as long as the lane's last call took: a straggler's step that runs longer than
        a call is then likely a slow tail, and the call goes without it. (Sending each episode's turn the moment it
        is ready would play a fast step's episode alone, then the others: many small calls where lockstep makes one,
        and a call costs about as much for 1 prompt as for 8 while decoding is latency-bound.)"""
        by_lane: dict[int, list[_TurnInProgress]] = {}
        for turn in sorted(self.ready, key=lambda t: t.episode.slot):
            by_lane.setdefault(self.lanes.lane_of(turn.episode.slot), []).append(turn)
        # one lookup per episode, not one per (lane, episode at its env step): O(n) per dispatch, not O(lanes · n)
        stepping = {self.lanes.lane_of(slot) for slot in self.at_env}
        waiting: list[_TurnInProgress] = []
        for lane, turns in sorted(by_lane.items()):
            if lane in self.jobs or not self._worth_a_call(lane, turns, stepping):
                waiting.extend(turns)
                continue
            specs = [self.hooks.turn_intervention(t.episode, self.ctx) for t in turns]
            interventions = specs if any(s is not None for s in specs) else None
            job = GenerationJob(lane, [t.episode.slot for t in turns], [t.prompt for t in turns],
                                self.hooks.turn_sampling(self.ctx), interventions)
            self.jobs[lane], self.turns[lane] = self.lanes.submit(job), turns
        self.ready = waiting

    def _worth_a_call(self, lane: int, turns: list[_TurnInProgress], stepping: set[int]) -> bool:
        """`stepping`: the lanes with an episode at its env step."""
        if lane not in stepping:
            return True
        return time.monotonic() - min(t.since for t in turns) >= self._patience(lane)

    def _patience(self, lane: int) -> float:
        return self.straggler_wait * self.call_seconds.get(lane, 0.0)

    def _next_deadline(self) -> float | None:
        """Seconds until a waiting lane's oldest ready turn has waited long enough (None: no lane waits)."""
        now, out = time.monotonic(), None
        for turn in self.ready:
            lane = self.lanes.lane_of(turn.episode.slot)
            if lane not in self.jobs:
                left = max(0.0, self._patience(lane) - (now - turn.since))
                out = left if out is None else min(out, left)
        return out

    def _collect_generations(self) -> bool:
        refs = [job.ref for job in self.jobs.values() if job.completions is None and job.ref is not None]
        returned: set[Any] = set()
        if refs:
            import ray

            returned = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0])
        done = [lane for lane, job in sorted(self.jobs.items()) if job.completions is not None or job.ref in returned]
        for lane in done:
            job, turns = self.jobs.pop(lane), self.turns.pop(lane)
            completions = self.lanes.result(job)
            self.call_seconds[lane] = time.perf_counter() - job.started
            self.ctx.stats.generate_seconds += self.call_seconds[lane]
            self.ctx.stats.generated_tokens += sum(len(c.token_ids) for c in completions)
            self._review(turns, completions)
        return bool(done)

    def _review(self, turns: list[_TurnInProgress], completions: list[Completion]) -> None:
        """Kept turns go to their env step (or are recorded at once when not executed); rejected ones are generated
        again from the same prompt."""
        actions: dict[int, str] = {}
        by_attempt: dict[int, list[tuple[_TurnInProgress, Completion]]] = {}
        for turn, completion in zip(turns, completions, strict=True):  # grouped before a rejection bumps an attempt
            by_attempt.setdefault(turn.attempt, []).append((turn, completion))
        for attempt, pairs in sorted(by_attempt.items()):
            keep = list(self.hooks.review_turns([t.episode for t, _ in pairs], [c for _, c in pairs], attempt,
                                                self.ctx))
            if len(keep) != len(pairs):
                raise AgentforgeError(f"rollout hooks {self.hooks.name!r}: review_turns returned {len(keep)} "
                                      f"decisions for {len(pairs)} turns; return one bool per turn")
            for (turn, completion), kept in zip(pairs, keep, strict=True):
                if kept:
                    self.ctx.stats.turns += 1
                    parsed, action = parse_turn(self.ctx, turn.episode, completion)
                    if action is None:
                        self._record(turn, completion, parsed, None)
                    else:
                        actions[turn.episode.slot] = action
                        self.at_env[turn.episode.slot] = (turn, completion, parsed)
                    continue
                turn.episode.trajectory.spans.append(Span.from_completion(
                    completion, turn.prompt, LossRole.NOT_TRAINED, "discarded_turn", turn_index=turn.step - 1,
                    attempt=turn.attempt))
                self.ctx.stats.regenerated_turns += 1
                turn.attempt += 1
                turn.since = time.monotonic()
                if turn.attempt >= self.limit:
                    raise AgentforgeError(f"rollout hooks {self.hooks.name!r} rejected turn {turn.step} of episode "
                                          f"slot {turn.episode.slot} {self.limit} times in a row; a review must "
                                          "accept a turn after a bounded number of attempts (e.g. T2PO's max_try)")
                self.ready.append(turn)
        if actions:
            t0 = time.perf_counter()
            self.ctx.pool.submit_steps(actions)
            self.ctx.stats.env_seconds += time.perf_counter() - t0

    # ------------------------------------------------------------------------------------------------ env
    def _collect_env_steps(self) -> bool:
        if not self.at_env:
            return False
        t0 = time.perf_counter()
        results = self.ctx.pool.collect_steps()
        self.ctx.stats.env_seconds += time.perf_counter() - t0
        self.ctx.stats.env_steps += len(results)
        for slot in sorted(results):
            turn, completion, parsed = self.at_env.pop(slot)
            self._record(turn, completion, parsed, results[slot])
        return bool(results)

    def _record(self, turn: _TurnInProgress, completion: Completion, parsed: ParsedResponse,
                outcome: Any) -> None:
        record_turn(self.ctx, turn.episode, turn.prompt, completion, parsed, outcome, turn.step)
        if turn.episode.done:
            self.finished += 1
            if self.on_progress is not None:
                self.on_progress(self.finished, len(self.episodes), self.ctx.stats)
        else:
            self.ready.append(self._turn(turn.episode, turn.step + 1))

    # ------------------------------------------------------------------------------------------------ waiting
    def _wait(self) -> None:
        """Nothing is ready: sleep until a replica call or an env step returns (or the pool's poll interval, so a
        hung env step is noticed)."""
        refs = [job.ref for job in self.jobs.values() if job.completions is None and job.ref is not None]
        refs += self.ctx.pool.pending_steps()
        deadline = self._next_deadline()
        if deadline is not None and deadline <= 0:
            return  # a lane has waited long enough: the next dispatch sends its call
        if not refs:
            if self.at_env and self.ctx.pool.steps_in_flight:
                return  # results are already there: the next collect takes them
            raise AgentforgeError(f"per-episode scheduling stalled: {len(self.at_env)} episode(s) wait on env steps "
                                  f"the pool ({type(self.ctx.pool).__name__}) does not have in flight")
        import ray

        timeouts = [t for t in (self.ctx.pool.poll_seconds, deadline) if t is not None]
        t0 = time.perf_counter()
        ray.wait(refs, num_returns=1, timeout=min(timeouts) if timeouts else None)
        self.ctx.stats.idle_seconds += time.perf_counter() - t0
