"""The default rollout workflow: B·G episodes played turn by turn, in lockstep (turn k of every active episode
generated together) or per episode (`agent.schedule=per_episode`: an episode's next turn is generated as soon as its
own env step returns; `per_episode.py`).

Environment logic stays in the env pool, prompt formatting in the template, sampling in the engine, algorithm
changes in `RolloutHooks`: the workflow only moves data between them and records each turn exactly as the engine
produced it (token ids and log-probs), with its loss role.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from agentforge.agent.prompts import HistoryEntry
from agentforge.envs.replay import ReplayResult
from agentforge.errors import ConfigError
from agentforge.rollout.hooks import RolloutHooks
from agentforge.rollout.per_episode import PerEpisodeScheduler
from agentforge.rollout.sides import check_history, split_sides
from agentforge.rollout.turns import generate_reviewed, parse_turn, record_turn
from agentforge.rollout.workflow import (
    Episode,
    EpisodePlan,
    ProgressCallback,
    RolloutContext,
    RolloutResult,
    RolloutWorkflow,
)
from agentforge.types import Group, Task, Trajectory


class MultiTurnWorkflow(RolloutWorkflow):
    """Lockstep multi-turn play with hooks (see `RolloutHooks`); without hooks it is plain GRPO/GiGPO play."""

    def __init__(self, hooks: RolloutHooks | None = None) -> None:
        self.hooks = hooks or RolloutHooks()

    def run(self, ctx: RolloutContext, tasks: Sequence[Task], group_size: int,
            on_progress: ProgressCallback | None = None) -> RolloutResult:
        if group_size < 1:
            raise ConfigError(f"group_size must be >= 1, got {group_size}")
        started = time.perf_counter()
        ctx = ctx.fresh()
        plans = self.hooks.plan(list(tasks), group_size)
        episodes = self._start(ctx, plans)
        self.hooks.before_first_turn(episodes, ctx)
        if ctx.config.schedule == "per_episode":
            finished = PerEpisodeScheduler(self.hooks, ctx, episodes, on_progress).run()
        else:
            finished = self._play_lockstep(ctx, episodes, on_progress)
        for episode in episodes:
            episode.done = True
        reward_metrics = ctx.score_episodes([e.trajectory for e in episodes])  # before the hooks read the rewards
        self.hooks.after_episodes(episodes, ctx)
        if on_progress is not None and finished != len(episodes):
            on_progress(len(episodes), len(episodes), ctx.stats)
        ctx.stats.wall_seconds = time.perf_counter() - started
        groups = split_sides([Group(task=task, trajectories=[e.trajectory for e in episodes if e.plan.group == g])
                              for g, task in enumerate(tasks)])  # self-play: a group per side (rollout.sides)
        return RolloutResult(groups, ctx.stats, {**self.hooks.metrics(), **reward_metrics})

    def _play_lockstep(self, ctx: RolloutContext, episodes: list[Episode],
                       on_progress: ProgressCallback | None) -> int:
        """Turn k of every active episode together: one generate call and one env step call per turn."""
        finished = 0
        for step in range(1, ctx.config.max_turns + 1):
            active = [e for e in episodes if not e.done]
            if not active:
                break
            self._play_turn(ctx, active, step)
            finished = sum(e.done for e in episodes)
            if on_progress is not None:
                on_progress(finished, len(episodes), ctx.stats)
        return finished

    # ------------------------------------------------------------------------------------------------ start
    def _start(self, ctx: RolloutContext, plans: list[EpisodePlan]) -> list[Episode]:
        """Reset one env per plan; a plan with a prefix starts where its replayed actions lead (branching), with
        those steps in its history window."""
        t0 = time.perf_counter()
        tasks = [plan.task for plan in plans]
        if any(plan.prefix for plan in plans):
            starts = ctx.pool.reset_with_prefixes(tasks, [list(plan.prefix) for plan in plans])
            observations = [start.observation for start in starts]
            histories = [prefix_history(start) for start in starts]
            ended = [start.done for start in starts]
            ctx.stats.env_steps += sum(len(start.steps) for start in starts)
        else:
            observations = ctx.pool.reset(tasks)
            histories, ended = [[] for _ in plans], [False] * len(plans)
        ctx.stats.env_seconds += time.perf_counter() - t0
        check_history(ctx.config, observations)
        episodes = []
        for slot, plan in enumerate(plans):
            trajectory = Trajectory(task=plan.task, rollout_index=plan.rollout_index, meta=dict(plan.meta))
            if plan.prefix:
                trajectory.meta["prefix"] = list(plan.prefix)
            episodes.append(Episode(slot, plan, trajectory, observations[slot], histories[slot], done=ended[slot]))
        return episodes

    # ------------------------------------------------------------------------------------------------ turns
    def _play_turn(self, ctx: RolloutContext, active: list[Episode], step: int) -> None:
        ctx.summarise(active)  # agent.history=summary: the episodes near their budget summarise, in one call
        active = [e for e in active if not e.done]
        if not active:
            return
        prompts = [ctx.render(e, step) for e in active]
        completions = generate_reviewed(self.hooks, ctx, active, prompts, self.hooks.turn_sampling(ctx),
                                        [step - 1] * len(active))
        ctx.stats.turns += len(active)
        parsed = [parse_turn(ctx, episode, completion) for episode, completion in zip(active, completions, strict=True)]
        actions = {episode.slot: action for episode, (_, action) in zip(active, parsed, strict=True) if action}

        t0 = time.perf_counter()
        results = ctx.pool.step(actions) if actions else {}
        ctx.stats.env_seconds += time.perf_counter() - t0
        ctx.stats.env_steps += len(actions)

        for episode, prompt_ids, completion, (result, _) in zip(active, prompts, completions, parsed, strict=True):
            record_turn(ctx, episode, prompt_ids, completion, result, results.get(episode.slot), step)

def prefix_history(start: ReplayResult) -> list[HistoryEntry]:
    """The history window's entries for replayed prefix steps: the observation each action was taken in."""
    seen = [start.initial_observation, *(step.observation for step in start.steps)]
    return [HistoryEntry(seen[i].text, step.action) for i, step in enumerate(start.steps)]
