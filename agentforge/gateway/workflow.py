"""The gateway workflow: episodes played by an external agent that calls the model through the OpenAI-compatible
gateway (`env=agent`). Each episode is a session; every model call becomes one turn with its exact prompt ids,
sampled ids and log-probs; the agent's return value is the episode's reward.

    tasks ──plan──▶ sessions ──agents run concurrently (asyncio tasks; sync agents in threads)──▶
        each call: render (token-exact) ─▶ batcher (all sessions' calls together) ─▶ engine ─▶ parse tool calls
    ──rewards (returned, reported, or the verifier's)──▶ Groups ──▶ Algorithm.advantages ─▶ learner

Faults never end the iteration: an agent that raises, runs past `timeout`, or never calls the model yields a failed
episode (reward 0, counted in `agent/failed_episodes`, the exception text kept in `Trajectory.meta["agent_error"]`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentforge.errors import AgentforgeError
from agentforge.gateway.agent_env import AgentTask, load_callable
from agentforge.gateway.batcher import GenerationBatcher
from agentforge.gateway.calls import CallHandler
from agentforge.gateway.errors import ended_session
from agentforge.gateway.expert import ExpertFn, ExpertReplier
from agentforge.gateway.rendering import ChatRenderer
from agentforge.gateway.server import LOOPBACK_HOSTS, GatewayServer
from agentforge.gateway.sessions import Session, SessionRegistry
from agentforge.rollout.hooks import RolloutHooks
from agentforge.rollout.workflow import (
    Episode,
    ProgressCallback,
    RolloutContext,
    RolloutResult,
    RolloutStats,
    RolloutWorkflow,
)
from agentforge.tracking.redact import redact_text
from agentforge.types import Group, Observation, SamplingConfig, Task, Trajectory

log = logging.getLogger("agentforge.gateway")


class EpisodeOutcome:
    """What one agent run ended with."""

    def __init__(self, reward: float = 0.0, won: bool | None = None, info: dict[str, Any] | None = None,
                 error: str | None = None, kind: str = "ok", summary: str | None = None) -> None:
        self.reward, self.won, self.info, self.error, self.kind = float(reward), won, dict(info or {}), error, kind
        self.summary = summary or error  # one line for the log (error: the whole traceback)


def read_result(result: Any) -> EpisodeOutcome | None:
    """An agent's return value as an outcome: a number, a dict {reward, won?, info?}, or None (unscored)."""
    if result is None:
        return None
    if isinstance(result, bool) or not isinstance(result, (int, float, dict)):
        raise TypeError(f"the agent returned {type(result).__name__}; return a reward (float), a dict "
                        "{'reward': float, 'won': bool, 'info': {...}}, or None")
    if isinstance(result, dict):
        if "reward" not in result:
            raise TypeError(f"the agent returned a dict without 'reward' (keys {sorted(result)})")
        return EpisodeOutcome(result["reward"], result.get("won"), result.get("info"))
    return EpisodeOutcome(result)


class GatewayWorkflow(RolloutWorkflow):
    """Plays `env=agent` episodes through a gateway it starts on first use (one per workflow: train and eval each
    have theirs) and keeps for the process's life."""

    def __init__(self, options: dict[str, Any], hooks: RolloutHooks | None = None, max_model_len: int = 4096,
                 expert: ExpertFn | None = None) -> None:
        """With `expert`, every model call is answered by the expert instead of an engine (`play_expert`: the
        tool-format warm start, `agentforge.gateway.expert`)."""
        self.options, self.hooks, self.max_model_len = dict(options), hooks or RolloutHooks(), int(max_model_len)
        self.expert = expert
        self.agent = load_callable(self.options.get("entry"), "env.entry")
        verifier = self.options.get("verifier")
        self.verifier = load_callable(verifier, "env.verifier") if verifier else None
        self.registry = SessionRegistry()
        self._ctx: RolloutContext | None = None
        self._stats = RolloutStats()
        self.server: GatewayServer | None = None
        self.batcher: GenerationBatcher | None = None
        self.late_rewards = 0  # report_reward calls after their episode ended (refused), counted in the next batch

    # -------------------------------------------------------------------------------------------- gateway
    def _ensure_gateway(self, tokenizer: Any) -> GatewayServer:
        if self.server is None:
            renderer = ChatRenderer(tokenizer, str(self.options.get("special_tokens", "text")))
            replier = None
            if self.expert is None:
                self.batcher = GenerationBatcher(lambda: self._ctx, self.hooks, self.registry.live,
                                                 float(self.options.get("batch_window_s", 0.2)))
            else:
                replier = ExpertReplier(self.expert, renderer, self._agent_task)
            handler = CallHandler(renderer, self.batcher, self._sampling, self.max_model_len,
                                  str(self.options.get("model_name", "agentforge-policy")), lambda: self._stats,
                                  expert=replier)
            self.server = GatewayServer(self.registry, handler, str(self.options.get("host", "127.0.0.1")),
                                        int(self.options.get("port", 0)),
                                        max_body_bytes=int(float(self.options.get("max_body_mb", 16)) * 1024**2))
            log.info("gateway listening on %s", self.server.url)
            if self.server.host not in LOOPBACK_HOSTS:
                log.warning("the gateway listens on %s: reachable from other machines (each session's token is the "
                            "only guard; HTTP is not encrypted)", self.server.host)
        return self.server

    def _sampling(self) -> SamplingConfig:
        """The run's sampling for the engine's calls (expert play has no engine: no budget but the context's)."""
        if self._ctx is None:
            return SamplingConfig(max_new_tokens=self.max_model_len)
        return self.hooks.turn_sampling(self._ctx)

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        if self.server is not None:
            self.server.close()
        self.server = self.batcher = None

    # ------------------------------------------------------------------------------------------------ run
    def run(self, ctx: RolloutContext, tasks: Sequence[Task], group_size: int,
            on_progress: ProgressCallback | None = None) -> RolloutResult:
        if self.expert is not None:
            raise AgentforgeError("this gateway workflow plays the expert (play_expert), not the engine")
        ctx = ctx.fresh()
        self._ctx = ctx
        return self._play(ctx.tokenizer, ctx.stats, tasks, group_size, on_progress, ctx)

    def play_expert(self, tokenizer: Any, tasks: Sequence[Task],
                    on_progress: ProgressCallback | None = None) -> RolloutResult:
        """One episode per task with the expert answering every model call (no engine, no algorithm hooks)."""
        if self.expert is None:
            raise AgentforgeError("play_expert needs a workflow built with an expert")
        return self._play(tokenizer, RolloutStats(), tasks, 1, on_progress, None)

    def _play(self, tokenizer: Any, stats: RolloutStats, tasks: Sequence[Task], group_size: int,
              on_progress: ProgressCallback | None, ctx: RolloutContext | None) -> RolloutResult:
        started = time.perf_counter()
        self._stats = stats
        server = self._ensure_gateway(tokenizer)
        plans = self.hooks.plan(list(tasks), group_size)
        episodes = [Episode(slot, plan, Trajectory(task=plan.task, rollout_index=plan.rollout_index,
                                                   meta=dict(plan.meta)), Observation("", anchor=""))
                    for slot, plan in enumerate(plans)]
        sessions = [self.registry.open(e, int(self.options.get("max_calls", 16))) for e in episodes]
        outcomes = asyncio.run(self._run_agents(server, sessions, on_progress, stats))
        for session in sessions:
            self.registry.end(session, "its episode ended")
        metrics = self._finish(episodes, sessions, outcomes)
        metrics["agent/generate_calls"] = float(stats.generate_calls)
        for episode in episodes:
            episode.done = True
        if ctx is not None:
            metrics.update(ctx.score_episodes([e.trajectory for e in episodes]))  # before the hooks read the rewards
            self.hooks.after_episodes(episodes, ctx)
        self.registry.forget(sessions)
        stats.wall_seconds = time.perf_counter() - started
        groups = [Group(task=task, trajectories=[e.trajectory for e in episodes if e.plan.group == g])
                  for g, task in enumerate(tasks)]
        return RolloutResult(groups, stats, {**self.hooks.metrics(), **metrics})

    async def _run_agents(self, server: GatewayServer, sessions: list[Session],
                          on_progress: ProgressCallback | None, stats: RolloutStats) -> list[EpisodeOutcome]:
        timeout = float(self.options.get("timeout", 300.0))
        finished = 0
        # not a `with`: a sync agent hung past its timeout must not hold the iteration (its thread is left to end
        # on its own; its session is closed, so its next model call fails)
        pool = ThreadPoolExecutor(max_workers=max(1, len(sessions)), thread_name_prefix="agentforge-agent")
        try:
            async def one(session: Session) -> EpisodeOutcome:
                nonlocal finished
                task = self._agent_task(session)
                try:
                    if inspect.iscoroutinefunction(self.agent):
                        call = self.agent(task, server.base_url(session.id), session.token)
                    else:
                        call = asyncio.get_running_loop().run_in_executor(
                            pool, self.agent, task, server.base_url(session.id), session.token)
                    result = await asyncio.wait_for(call, timeout)
                    outcome = read_result(result)
                    if outcome is None:
                        outcome = self._verify(session)
                except asyncio.TimeoutError:
                    outcome = EpisodeOutcome(error=f"the agent ran past env.timeout={timeout:g}s",
                                             kind="timeout")
                except Exception as exc:  # noqa: BLE001  (an agent's failure is its episode's, not the run's)
                    outcome = EpisodeOutcome(error="".join(traceback.format_exception(exc)).strip(), kind="raised",
                                             summary=f"{type(exc).__name__}: {exc}")
                self.registry.end(session, "its agent returned" if outcome.kind == "ok" else outcome.kind)
                finished += 1
                if on_progress is not None:
                    on_progress(finished, len(sessions), stats)
                return outcome

            return list(await asyncio.gather(*(one(s) for s in sessions)))
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _agent_task(self, session: Session) -> AgentTask:
        episode = session.episode

        def report(reward: float) -> None:
            value = float(reward)
            with session.lock:
                if session.ended is not None:  # the episode is scored and may already be trained: refused, counted
                    self.late_rewards += 1
                    raise ended_session(session.id, session.ended)
                if not math.isfinite(value):  # this episode's agent error, not a skipped update for the batch
                    episode.trajectory.meta["bad_reward"] = f"report_reward({reward!r}): not a finite number"
                    return
                if episode.trajectory.turns:
                    episode.trajectory.turns[-1].reward += float(reward)
                    episode.trajectory.turns[-1].env_reward += float(reward)
                else:
                    episode.trajectory.meta["early_reward"] = episode.trajectory.meta.get("early_reward", 0.0) + reward

        return AgentTask(task=episode.plan.task, session_id=session.id, rollout_index=episode.plan.rollout_index,
                         env_name=str(self.options.get("task_env")), env_options=dict(self.options.get(
                             "task_env_options") or {}), report_reward=report)

    def _verify(self, session: Session) -> EpisodeOutcome:
        if self.verifier is None:
            return EpisodeOutcome(error="the agent returned None and no env.verifier is set; return a reward",
                                  kind="unscored")
        final = session.calls[-1].reply["content"] if session.calls else ""
        outcome = read_result(self.verifier(self._agent_task(session), final))
        return outcome or EpisodeOutcome(error="the verifier returned None", kind="unscored")

    def _finish(self, episodes: list[Episode], sessions: list[Session],
                outcomes: list[EpisodeOutcome]) -> dict[str, float]:
        """Rewards onto the episodes' last turns; failures recorded and counted."""
        counts = {"failed_episodes": 0, "timeouts": 0, "raised": 0, "unscored": 0, "no_model_calls": 0,
                  "bad_reward": 0, "reencoded_calls": 0, "tool_parse_errors": 0, "retries_replayed": 0,
                  "late_rewards": self.late_rewards}
        self.late_rewards = 0
        for episode, session, outcome in zip(episodes, sessions, outcomes, strict=True):
            trajectory = episode.trajectory
            turns = trajectory.turns
            early = float(trajectory.meta.pop("early_reward", 0.0))  # reported before the first call: its reward
            if turns and early:
                turns[0].reward += early
                turns[0].env_reward += early
            if not turns and outcome.kind == "ok":
                outcome = EpisodeOutcome(error="the agent never called the model", kind="no_model_calls")
            bad = trajectory.meta.pop("bad_reward", None)
            if outcome.kind == "ok" and (bad or not math.isfinite(float(outcome.reward))):
                outcome = EpisodeOutcome(error=bad or f"the agent's reward {outcome.reward!r} is not a finite number",
                                         kind="bad_reward")
            if outcome.kind != "ok":
                counts["failed_episodes"] += 1
                counts[{"timeout": "timeouts"}.get(outcome.kind, outcome.kind)] += 1
                trajectory.meta["agent_error"] = redact_text(outcome.error, self.options) if outcome.error else None
                trajectory.meta["agent_outcome"] = outcome.kind
                log.warning("episode %s (%s) failed: %s", session.id, trajectory.task.describe(),
                            redact_text(outcome.summary or outcome.kind, self.options).splitlines()[0][:300])
            elif turns:
                turns[-1].reward += outcome.reward
                turns[-1].env_reward += outcome.reward
                trajectory.won = bool(outcome.won) if outcome.won is not None else outcome.reward > 0
                trajectory.meta.update(outcome.info)
            if turns:
                turns[-1].done = True
            trajectory.meta["session"] = session.id
            trajectory.meta["model_calls"] = len(session.calls)
            counts["reencoded_calls"] += sum(t.info.get("reencoded") is not None for t in turns)
            counts["tool_parse_errors"] += sum(t.info.get("tool_parse_error") is not None for t in turns)
            counts["retries_replayed"] += session.replays
        calls = sum(len(s.calls) for s in sessions)
        return {**{f"agent/{k}": float(v) for k, v in counts.items()}, "agent/model_calls": float(calls),
                "agent/calls_per_episode": calls / max(len(sessions), 1)}
