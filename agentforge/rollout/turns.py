"""One turn of an episode, shared by the schedules and the gateway: generate it under the hooks' review, parse the
completion into an action, then record the turn exactly as the engine produced it (token ids, log-probs, forced
mask) with the env's outcome."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentforge.agent.parsing import ParsedResponse, parse_response, think_token_count
from agentforge.agent.prompts import HistoryEntry
from agentforge.errors import AgentforgeError
from agentforge.rollout.workflow import Episode, RolloutContext
from agentforge.types import Completion, LossRole, SamplingConfig, Span, StepResult, Turn

if TYPE_CHECKING:
    from agentforge.engines.interventions import InterventionSpec
    from agentforge.rollout.hooks import RolloutHooks


def generate_reviewed(hooks: RolloutHooks, ctx: RolloutContext, episodes: Sequence[Episode],
                      prompts: Sequence[list[int]], sampling: SamplingConfig,
                      turn_indices: Sequence[int],
                      overrides: Sequence[InterventionSpec | None] | None = None) -> list[Completion]:
    """One generation per episode (batched), under the hooks: each episode's decoding intervention (or its entry in
    `overrides` where that is not None), then the review; a rejected turn is generated again from the same prompt
    (the rejected attempt kept as a NOT_TRAINED span at `turn_indices[i]`), at most `hooks.max_turn_attempts`
    times."""
    out: list[Completion | None] = [None] * len(episodes)
    pending = list(range(len(episodes)))
    limit = int(hooks.max_turn_attempts)
    for attempt in range(limit):
        batch = [episodes[i] for i in pending]
        specs = [overrides[i] if overrides is not None and overrides[i] is not None
                 else hooks.turn_intervention(episodes[i], ctx) for i in pending]
        interventions = specs if any(s is not None for s in specs) else None
        completions = ctx.generate([prompts[i] for i in pending], sampling, interventions=interventions,
                                   keys=[e.slot for e in batch])
        keep = list(hooks.review_turns(batch, completions, attempt, ctx))
        if len(keep) != len(batch):
            raise AgentforgeError(f"rollout hooks {hooks.name!r}: review_turns returned {len(keep)} "
                                  f"decisions for {len(batch)} turns; return one bool per turn")
        retry = []
        for i, completion, kept in zip(pending, completions, keep, strict=True):
            if kept:
                out[i] = completion
            else:
                episodes[i].trajectory.spans.append(Span.from_completion(
                    completion, prompts[i], LossRole.NOT_TRAINED, "discarded_turn", turn_index=turn_indices[i],
                    attempt=attempt))
                retry.append(i)
        ctx.stats.regenerated_turns += len(retry)
        pending = retry
        if not pending:
            return [c for c in out if c is not None]
    raise AgentforgeError(f"rollout hooks {hooks.name!r} rejected turn {turn_indices[pending[0]] + 1} of "
                          f"{len(pending)} episode(s) {limit} times in a row; a review must accept a turn after a "
                          "bounded number of attempts (e.g. T2PO's max_try)")


def parse_turn(ctx: RolloutContext, episode: Episode, completion: Completion) -> tuple[ParsedResponse, str | None]:
    """The parsed response and the action to execute (None: the turn is not executed, only recorded)."""
    template = ctx.template_for(episode.trajectory.task.env)
    result = parse_response(completion.text, episode.observation.admissible, template.action_tag,
                            template.require_think, template.keep_whitespace)
    executable = result.action is not None and result.admissible
    action = result.action if executable and (result.format_ok or ctx.config.execute_relaxed) else None
    return result, action


def version_info(completion: Completion) -> dict[str, Any]:
    """Which weights and which replica sampled a response (engine replicas), and where a push landed inside it."""
    if completion.policy_version is None:
        return {}
    info: dict[str, Any] = {"policy_version": completion.policy_version, "replica": completion.replica}
    if completion.version_switches:  # the turn spans versions: [token index, version] where each took over
        info["policy_version_switches"] = [list(switch) for switch in completion.version_switches]
    return info


TRUNCATED = "truncated: the reply reached max_new_tokens"


def record_turn(ctx: RolloutContext, episode: Episode, prompt_ids: list[int], completion: Completion,
                result: ParsedResponse, outcome: StepResult | None, step: int) -> None:
    """Append the turn to the episode's trajectory and history; move the episode to the env's next observation and
    end it when the env says so or at `max_turns`; in a conversation, build its next prompt; in either history mode,
    end it as truncated when its next prompt would not fit (the context limit).

    A reply cut by max_new_tokens that gives no valid action is recorded as truncated (`info["truncated"]`,
    `parse_error` says so), not as a format error; it is penalised like any turn the env could not take."""
    env_reward = outcome.reward if outcome is not None else 0.0
    truncated = completion.finish_reason == "length" and not result.valid
    info: dict[str, Any] = {"executed": outcome is not None, "parse_error": TRUNCATED if truncated else result.error,
                            "think_tokens": think_token_count(ctx.tokenizer, completion.token_ids, completion.text)}
    if truncated:
        info["truncated"] = True
    info.update(episode.observation.info)  # e.g. whose move it was (self-play: rollout.sides)
    info.update(version_info(completion))
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
        reward=env_reward,  # the reward stages (agentforge/rewards/) change it once the episode has ended
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
    if ctx.config.conversation and not episode.done:
        error = "" if outcome is not None else info["parse_error"] or "no action"
        ctx.extend_conversation(episode, prompt_ids, list(completion.token_ids), len(episode.plan.prefix) + step + 1,
                                error)
    elif not episode.done:
        ctx.end_if_next_prompt_too_long(episode, step + 1)
