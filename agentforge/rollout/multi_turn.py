"""The AgentLoop: drives B·G episodes turn by turn, all active episodes generating together.

Environment logic stays in the env pool, prompt formatting in the template, sampling in the engine: the loop only
moves data between them and records each turn exactly as the engine produced it (token ids and log-probs).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentforge.agent.chat import chat_prompt_ids
from agentforge.agent.parsing import ParsedResponse, parse_response
from agentforge.agent.prompts import HistoryEntry, PromptTemplate
from agentforge.engines.base import RolloutEngine
from agentforge.engines.interventions import InterventionSpec
from agentforge.envs.pool import EnvPool
from agentforge.errors import ConfigError
from agentforge.types import Group, Observation, SamplingConfig, Task, Trajectory, Turn


@dataclass
class AgentConfig:
    """How episodes are played. `execute_relaxed`: act on actions found by the relaxed parser (still penalised)."""

    max_turns: int = 10
    history_length: int = 2
    invalid_penalty: float = 0.1
    execute_relaxed: bool = True
    few_shot: bool = False
    max_prompt_tokens: int = 2048
    sampling: SamplingConfig = field(default_factory=SamplingConfig)


@dataclass
class RolloutStats:
    """Throughput counters of one `AgentLoop.run` (for the summary and the progress bar)."""

    generated_tokens: int = 0
    generate_seconds: float = 0.0
    env_steps: int = 0
    env_seconds: float = 0.0
    turns: int = 0
    wall_seconds: float = 0.0


@dataclass
class _Episode:
    slot: int
    trajectory: Trajectory
    observation: Observation
    history: list[HistoryEntry] = field(default_factory=list)
    done: bool = False


ProgressCallback = Callable[[int, int, RolloutStats], None]


def render_turn_prompt(
    template: PromptTemplate,
    tokenizer: Any,
    config: AgentConfig,
    observation: Observation,
    history: list[HistoryEntry],
    step: int,
    task: Task,
) -> list[int]:
    """A turn's prompt ids: the last K history entries, dropping the oldest until the prompt fits the budget.

    Shared by the AgentLoop and expert-data builders so SFT data has exactly the token format of rollouts.
    """
    window = history[-config.history_length :] if config.history_length > 0 else []
    while True:
        intro = history[0].observation if history else observation.text
        ids = chat_prompt_ids(tokenizer, template.messages(observation, window, step, config.few_shot, intro))
        if len(ids) <= config.max_prompt_tokens:
            return ids
        if not window:
            raise ConfigError(
                f"the prompt for {task.describe()} has {len(ids)} tokens without history, over "
                f"agent.max_prompt_tokens={config.max_prompt_tokens}; raise it (and the engine's max_model_len) "
                "or shorten the env's observation"
            )
        window = window[1:]


class AgentLoop:
    """Plays groups of episodes with one engine and one env pool."""

    def __init__(
        self,
        engine: RolloutEngine,
        pool: EnvPool,
        template: PromptTemplate,
        config: AgentConfig,
        intervention: InterventionSpec | None = None,
    ) -> None:
        self.engine = engine
        self.pool = pool
        self.template = template
        self.config = config
        self.intervention = intervention
        self.tokenizer = engine.tokenizer

    def run(self, tasks: list[Task], group_size: int, on_progress: ProgressCallback | None = None) -> tuple[
        list[Group], RolloutStats
    ]:
        """Roll out every task `group_size` times; returns one Group per task (in task order) and counters."""
        if group_size < 1:
            raise ConfigError(f"group_size must be >= 1, got {group_size}")
        started = time.perf_counter()
        stats = RolloutStats()
        slot_tasks = [task for task in tasks for _ in range(group_size)]
        t0 = time.perf_counter()
        observations = self.pool.reset(slot_tasks)
        stats.env_seconds += time.perf_counter() - t0
        episodes = [
            _Episode(slot, Trajectory(task=task, rollout_index=slot % group_size), obs)
            for slot, (task, obs) in enumerate(zip(slot_tasks, observations, strict=True))
        ]
        finished = 0
        for step in range(1, self.config.max_turns + 1):
            active = [e for e in episodes if not e.done]
            if not active:
                break
            self._play_turn(active, step, stats)
            finished = sum(e.done for e in episodes)
            if on_progress is not None:
                on_progress(finished, len(episodes), stats)
        for episode in episodes:
            episode.done = True
        if on_progress is not None and finished != len(episodes):
            on_progress(len(episodes), len(episodes), stats)
        stats.wall_seconds = time.perf_counter() - started
        groups = [
            Group(task=task, trajectories=[e.trajectory for e in episodes[i * group_size : (i + 1) * group_size]])
            for i, task in enumerate(tasks)
        ]
        return groups, stats

    def _prompt_ids(self, episode: _Episode, step: int) -> list[int]:
        return render_turn_prompt(
            self.template, self.tokenizer, self.config, episode.observation, episode.history, step,
            episode.trajectory.task,
        )

    def _play_turn(self, active: list[_Episode], step: int, stats: RolloutStats) -> None:
        prompts = [self._prompt_ids(e, step) for e in active]
        interventions = [self.intervention] * len(active) if self.intervention is not None else None
        t0 = time.perf_counter()
        completions = self.engine.generate(prompts, self.config.sampling, interventions)
        stats.generate_seconds += time.perf_counter() - t0
        stats.generated_tokens += sum(len(c.token_ids) for c in completions)
        stats.turns += len(active)

        parsed: list[ParsedResponse] = []
        actions: dict[int, str] = {}
        for episode, completion in zip(active, completions, strict=True):
            result = parse_response(
                completion.text, episode.observation.admissible, self.template.action_tag, self.template.require_think
            )
            parsed.append(result)
            executable = result.action is not None and result.admissible
            if executable and (result.format_ok or self.config.execute_relaxed):
                actions[episode.slot] = result.action

        t0 = time.perf_counter()
        results = self.pool.step(actions) if actions else {}
        stats.env_seconds += time.perf_counter() - t0
        stats.env_steps += len(actions)

        for episode, prompt_ids, completion, result in zip(active, prompts, completions, parsed, strict=True):
            outcome = results.get(episode.slot)
            env_reward = outcome.reward if outcome is not None else 0.0
            penalty = 0.0 if result.valid else self.config.invalid_penalty
            info: dict[str, Any] = {"executed": outcome is not None, "parse_error": result.error}
            if outcome is not None:
                info.update(outcome.info)
            shown_action = result.action if outcome is not None else f"(invalid: {result.action or 'none'})"
            episode.trajectory.turns.append(
                Turn(
                    prompt_ids=prompt_ids,
                    response_ids=list(completion.token_ids),
                    logprobs=list(completion.logprobs),
                    forced_mask=list(completion.forced_mask),
                    response_text=completion.text,
                    action=result.action,
                    valid=result.valid,
                    reward=env_reward - penalty,
                    env_reward=env_reward,
                    anchor=episode.observation.anchor,
                    observation=episode.observation.text,
                    done=bool(outcome and outcome.done),
                    info=info,
                )
            )
            episode.history.append(HistoryEntry(episode.observation.text, shown_action))
            if outcome is not None:
                episode.observation = outcome.observation
                if outcome.won:
                    episode.trajectory.won = True
                if outcome.done:
                    episode.done = True
            if step >= self.config.max_turns:
                episode.done = True
