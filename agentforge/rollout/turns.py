"""One env turn of an episode, shared by both schedules: parse the completion into an action, then record the turn
exactly as the engine produced it (token ids, log-probs, forced mask) with the env's outcome."""

from __future__ import annotations

from typing import Any

from agentforge.agent.parsing import ParsedResponse, parse_response, think_token_count
from agentforge.agent.prompts import HistoryEntry
from agentforge.rollout.workflow import Episode, RolloutContext
from agentforge.types import Completion, LossRole, StepResult, Turn


def parse_turn(ctx: RolloutContext, episode: Episode, completion: Completion) -> tuple[ParsedResponse, str | None]:
    """The parsed response and the action to execute (None: the turn is not executed, only recorded)."""
    template = ctx.template
    result = parse_response(completion.text, episode.observation.admissible, template.action_tag,
                            template.require_think)
    executable = result.action is not None and result.admissible
    action = result.action if executable and (result.format_ok or ctx.config.execute_relaxed) else None
    return result, action


def record_turn(ctx: RolloutContext, episode: Episode, prompt_ids: list[int], completion: Completion,
                result: ParsedResponse, outcome: StepResult | None, step: int) -> None:
    """Append the turn to the episode's trajectory and history; move the episode to the env's next observation and
    end it when the env says so or at `max_turns`."""
    env_reward = outcome.reward if outcome is not None else 0.0
    penalty = 0.0 if result.valid else ctx.config.invalid_penalty
    info: dict[str, Any] = {"executed": outcome is not None, "parse_error": result.error,
                            "think_tokens": think_token_count(ctx.tokenizer, completion.token_ids, completion.text)}
    if completion.policy_version is not None:  # engine replicas: which weights, which replica
        info.update(policy_version=completion.policy_version, replica=completion.replica)
    if outcome is not None:
        info.update(outcome.info)
    shown_action = result.action if outcome is not None else f"(invalid: {result.action or 'none'})"
    episode.trajectory.turns.append(Turn(
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
        role=LossRole.ACTION,
    ))
    episode.history.append(HistoryEntry(episode.observation.text, shown_action))
    if outcome is not None:
        episode.observation = outcome.observation
        if outcome.won:
            episode.trajectory.won = True
        if outcome.done:
            episode.done = True
    if step >= ctx.config.max_turns:
        episode.done = True
