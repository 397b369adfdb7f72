"""The rollout seam: how the episodes of one iteration are produced from tasks.

A `RolloutWorkflow` turns tasks into groups of trajectories. The trainer, `agentforge rollout` and `agentforge eval`
all call one, so an algorithm that changes how episodes are produced (a strategy before the first turn, turns
regenerated from the same state, replayed and branched episodes, generations that are not trained) changes it in
one place: by giving `RolloutHooks` to the default multi-turn workflow, or by supplying its own workflow. The loop
and the trainer never branch on an algorithm's name.

The data's way through a workflow:

    tasks ──plan──▶ EpisodePlans ──pool.reset(+prefix)──▶ Episodes ──before_first_turn──▶ turns:
        render prompts (template) ─▶ engine.generate ─▶ review (keep | regenerate) ─▶ parse ─▶ pool.step
    ──after_episodes──▶ Groups (turns with loss roles, extra spans) ──▶ Algorithm.advantages ─▶ learner

`RolloutContext` bundles what a workflow plays with (engine, env pool, template, agent config, the recipe's
decoding intervention) and counts every generation, trained or not, in its `RolloutStats`. A mixed-env run
(`env=mix`) gives it one template per env (`templates`): each task is rendered and parsed with its own env's.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentforge.agent.prompts import HistoryEntry, PromptTemplate
from agentforge.agent.render import AgentConfig, after_summary_prompt, conversation_prompt, render_turn_prompt
from agentforge.engines.base import RolloutEngine
from agentforge.engines.interventions import InterventionSpec
from agentforge.errors import PromptTooLongError
from agentforge.hosting.pool import EnvPool
from agentforge.types import (
    Completion,
    Group,
    LossRole,
    Observation,
    ProgressCallback,
    RolloutStats,
    SamplingConfig,
    Span,
    Task,
    Trajectory,
)


@dataclass
class RolloutContext:
    """What a workflow plays with. `intervention` is the recipe's decoding intervention (or None); `rewards` the run's
    reward stages (`agentforge.rewards.RewardPipeline`: every workflow has them score its finished episodes; None:
    the env's rewards as they are)."""

    engine: RolloutEngine
    pool: EnvPool
    template: PromptTemplate
    config: AgentConfig
    intervention: InterventionSpec | None = None
    stats: RolloutStats = field(default_factory=RolloutStats)
    templates: dict[str, PromptTemplate] = field(default_factory=dict)  # env -> its template (env=mix)
    rewards: Any = None

    def score_episodes(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """The reward stages on finished episodes (each scored once); their metrics."""
        return self.rewards.score_episodes(trajectories) if self.rewards is not None else {}

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def template_for(self, env: str) -> PromptTemplate:
        """The prompt template of a task's env: its own in a mixed-env run, else the run's."""
        return self.templates.get(env, self.template)

    @property
    def prompt_limit(self) -> int:
        """The longest prompt a turn may have: `agent.max_prompt_tokens`, and room for `max_new_tokens` within the
        engine's `max_model_len` (when the engine says it)."""
        return self._limit_for(int(self.config.sampling.max_new_tokens))

    def _limit_for(self, new_tokens: int) -> int:
        limit = int(self.config.max_prompt_tokens)
        max_len = getattr(self.engine, "max_model_len", None)
        return min(limit, max_len - new_tokens) if isinstance(max_len, int) else limit

    def fresh(self) -> RolloutContext:
        """The same parts with zeroed counters: what each workflow run starts from."""
        return replace(self, stats=RolloutStats())

    def with_sampling(self, sampling: SamplingConfig) -> RolloutContext:
        """The same parts with another sampling config (eval temperature, a decoding baseline)."""
        return replace(self, config=replace(self.config, sampling=sampling), stats=RolloutStats())

    def with_pool(self, pool: EnvPool, template: PromptTemplate | None = None) -> RolloutContext:
        return replace(self, pool=pool, template=template or self.template, stats=RolloutStats())

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig | None = None,
                 interventions: list[InterventionSpec | None] | None = None, extra: bool = False,
                 keys: Sequence[Hashable] | None = None) -> list[Completion]:
        """Generate with the engine and count it; `extra=True` marks generations outside the env turns. `keys`
        (one per prompt: its episode) let engine replicas send an episode's turns to the same replica."""
        t0 = time.perf_counter()
        if keys is not None and getattr(self.engine, "routes_by_key", False):
            completions = self.engine.generate(prompts, sampling or self.config.sampling, interventions, keys=keys)
        else:
            completions = self.engine.generate(prompts, sampling or self.config.sampling, interventions)
        self.stats.generate_seconds += time.perf_counter() - t0
        self.stats.generate_calls += 1
        self.stats.generated_tokens += sum(len(c.token_ids) for c in completions)
        if extra:
            self.stats.extra_generations += len(completions)
        return completions

    def render(self, episode: Episode, turn: int) -> list[int]:
        """The prompt ids of the episode's generated turn `turn` (1-based; the env step counts its replayed prefix
        too): the template, its history window and notes; in a conversation, after its first turn, the prompt
        `extend_conversation` built from the last one."""
        if episode.summary_request is not None:
            self.summarise([episode])
        if self.config.conversation and episode.next_prompt is not None:
            return list(episode.next_prompt)
        return render_turn_prompt(self.template_for(episode.trajectory.task.env), self.tokenizer, self.config,
                                  episode.observation, episode.history, len(episode.plan.prefix) + turn,
                                  episode.trajectory.task, episode.notes)

    def end_if_next_prompt_too_long(self, episode: Episode, turn: int) -> None:
        """History window: an observation that grows with the episode (a game log, search results) can outgrow
        `agent.max_prompt_tokens` at a later turn even with no history shown. The episode then ends here as truncated,
        the conversation mode's stated policy (`meta["truncated"] = "context_limit"`, counted in
        `RolloutStats.context_limit_ends`), not the run; a first prompt that does not fit stays a config error."""
        try:
            self.render(episode, turn)
        except PromptTooLongError as error:
            self._end_at_context_limit(episode, error.tokens)

    def _end_at_context_limit(self, episode: Episode, tokens: int) -> None:
        episode.done = True
        episode.next_prompt = None
        episode.trajectory.meta["truncated"] = "context_limit"
        episode.trajectory.meta["next_prompt_tokens"] = tokens
        self.stats.context_limit_ends += 1

    def extend_conversation(self, episode: Episode, prompt_ids: list[int], response_ids: list[int], step: int,
                            error: str = "") -> None:
        """Conversation history: the episode's next prompt = this turn's prompt + its sampled ids + the env's reply.
        When it would pass `prompt_limit` the episode ends here as truncated (`meta["truncated"]`, counted in
        `RolloutStats.context_limit_ends`): the stated policy, rather than cutting the conversation. `step`: the
        env step of the next turn (1-based)."""
        template = self.template_for(episode.trajectory.task.env)
        ids = conversation_prompt(template, self.tokenizer, prompt_ids, response_ids, episode.observation,
                                  episode.history, step, error)
        summary = self.config.summary
        if self.config.summarises and len(ids) > summary.trigger * self.prompt_limit:
            request = conversation_prompt(template, self.tokenizer, prompt_ids, response_ids, episode.observation,
                                          episode.history, step, error, summary.instruction)
            if len(request) <= self.summary_prompt_limit:  # else the context limit ends it, as in a conversation
                episode.next_prompt, episode.summary_request = None, (request, step)
                return
        if len(ids) > self.prompt_limit:
            self._end_at_context_limit(episode, len(ids))
            return
        episode.next_prompt = ids

    @property
    def summary_prompt_limit(self) -> int:
        """The longest request for a summary: room for `agent.summary.max_tokens` within the engine's length."""
        return self._limit_for(int(self.config.summary.max_tokens))

    def summarise(self, episodes: Sequence[Episode]) -> None:
        """`agent.history=summary`: the episodes that asked for a summary write it (one batched call), and go on
        from a fresh prompt that shows it (`after_summary_prompt`). The summary is a span: trained with the
        advantage of the turn that follows it (`agent.summary.train`), or not trained; `at_tokens` is the
        conversation's length when it summarised. A fresh prompt that still does not fit ends the episode at the
        context limit."""
        waiting = [e for e in episodes if e.summary_request is not None and not e.done]
        if not waiting:
            return
        sampling = replace(self.config.sampling, max_new_tokens=int(self.config.summary.max_tokens))
        completions = self.generate([e.summary_request[0] for e in waiting], sampling, extra=True,
                                    keys=[e.slot for e in waiting])
        role = LossRole.SUMMARY if self.config.summary.train else LossRole.NOT_TRAINED
        for episode, completion in zip(waiting, completions, strict=True):
            (request, step), episode.summary_request = episode.summary_request, None
            episode.trajectory.spans.append(Span.from_completion(
                completion, request, role, "summary", turn_index=len(episode.trajectory.turns),
                at_tokens=len(request)))
            ids = after_summary_prompt(self.template_for(episode.trajectory.task.env), self.tokenizer,
                                       episode.observation, episode.history, step, completion.token_ids,
                                       episode.notes)
            if len(ids) > self.prompt_limit:
                self._end_at_context_limit(episode, len(ids))
            else:
                episode.next_prompt = ids


@dataclass(frozen=True)
class EpisodePlan:
    """One episode to play: its task, its index in the group, actions to replay before the first generated turn
    (branching from a mid-episode state) and metadata copied into `Trajectory.meta`."""

    task: Task
    rollout_index: int
    group: int
    prefix: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Episode:
    """A live episode. Hooks may read it and add `notes` (shown at the top of every turn prompt) or spans."""

    slot: int
    plan: EpisodePlan
    trajectory: Trajectory
    observation: Observation
    history: list[HistoryEntry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    done: bool = False
    next_prompt: list[int] | None = None  # agent.history=conversation: the next turn's prompt, built at record time
    summary_request: tuple[list[int], int] | None = None  # agent.history=summary: (its prompt, the next env step)


@dataclass
class RolloutResult:
    """The groups of one workflow run (in task order), its counters and the hooks' own metrics."""

    groups: list[Group]
    stats: RolloutStats
    metrics: dict[str, float] = field(default_factory=dict)


class RolloutWorkflow(ABC):
    """Produces the groups of one iteration from tasks."""

    @abstractmethod
    def run(self, ctx: RolloutContext, tasks: Sequence[Task], group_size: int,
            on_progress: ProgressCallback | None = None) -> RolloutResult:
        """Play every task (its episodes as the workflow plans them) and return one Group per task, in order (per
        task and side, in side order, where the policy plays every side of a game: `rollout.sides`)."""
