"""TrajEvolve's trajectory evolution: extra training samples built from this iteration's own trajectories.

The paper's text names two strategies plus think-only regeneration (ALGORITHMS.md, TrajEvolve 3); its Figure 1
draws three boxes, which we read as those two strategies and the think-only step that finishes a pruned sequence.
We build exactly that, no third strategy of our own:

- **prune**: a won episode's necessary steps alone (its redundant ones dropped), verified to still win by replay
  (`necessity.replay_pruned`, the replay the labelling already makes). The replay gives the state before each kept
  action; the policy then regenerates the reasoning for each kept action under a think-only prompt (the turn's
  usual prompt plus `PromptTemplate.think_only`: the action shown, only the reasoning asked for), so the sample
  reads as if the policy had played the short sequence itself.
- **branch**: an episode replayed to its first redundant step (a labelled win) or its first failed step (a turn
  the env did not carry out: an invalid response or a no-op; or a step the discriminator called redundant), and
  the policy plays on from that state with the usual prompts (`EpisodePlan.prefix`, the workflow's branching).
  A branch point at the first turn is not a branch (it would be one more plain rollout) and is skipped.

Tokens and old log-probs of a pruned turn: the response is the engine's own reasoning ids (the think-only
generation, stopped at `</think>`) followed by the original turn's action text (`<action>...</action>`, as the
policy wrote it) encoded by the tokenizer: the original action ids cannot be reused as they are because a BPE
token may span `</think><`. Where the regenerated reasoning cannot be used (no `</think>`, a last token running past
it that are not the start of the action text, a response that does not parse to the same action), the original
turn's response ids are kept whole. Either
way the turn is trained under its *training* prompt (the pruned history), which the engine never sampled from, so
the PPO old log-probs are the engine's scores of exactly these ids under that prompt (`RolloutEngine.score`), not
the think-only generation's. The think-only generation itself is kept as a NOT_TRAINED span (the viewer shows it).

Branched turns are ordinary sampled turns: their ids and log-probs are the engine's. Evolved trajectories join
their task's group (`meta["evolved"]`: prune | branch), so GiGPO's episode and step groups include them; rollout
metrics (success rate, steps) count only the played episodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from agentforge.agent.parsing import parse_response, think_token_count
from agentforge.agent.prompts import HistoryEntry, PromptTemplate
from agentforge.agent.render import render_turn_prompt
from agentforge.algorithms.necessity import NECESSARY, REDUNDANT, carried_out, executed
from agentforge.rollout.hooks import RolloutHooks
from agentforge.rollout.workflow import Episode, EpisodePlan, RolloutContext, RolloutStats
from agentforge.types import Completion, LossRole, Observation, Span, Task, Trajectory, Turn

if TYPE_CHECKING:
    from agentforge.envs.replay import ReplayResult, ReplayStep

PRUNE, BRANCH = "prune", "branch"
STRATEGIES = (PRUNE, BRANCH)
REASONING_MODES = ("regenerate", "reuse")
THINK_CLOSE = "</think>"
BY_PRUNING = "pruned"  # necessity_by of a pruned sequence's turns: each was necessary in its source episode


@dataclass(frozen=True)
class EvolutionOptions:
    """`strategies`: which to build, in priority order; `max_per_group`: evolved samples per task group at most
    (prune candidates first, shortest pruned sequence first, then branches); `reasoning`: `regenerate` (the
    think-only prompt) or `reuse` (keep each kept action's original response)."""

    strategies: tuple[str, ...] = STRATEGIES
    max_per_group: int = 2
    reasoning: str = "regenerate"


@dataclass
class Evolved:
    """One evolved sample and the group it joins."""

    group: int
    trajectory: Trajectory


def branch_point(trajectory: Trajectory) -> int | None:
    """The 0-based turn a branch starts from: a labelled win's first redundant step, another episode's first step
    not carried out or called redundant by the discriminator; None when there is none."""
    for k, turn in enumerate(trajectory.turns):
        if trajectory.won:
            if turn.info.get("necessity") == REDUNDANT:
                return k
        elif not carried_out(turn) or turn.info.get("necessity") == REDUNDANT:
            return k
    return None


def branch_prefix(trajectory: Trajectory, point: int) -> list[str]:
    """The actions the env carried out before the branch point (its own branch prefix included)."""
    prefix = [str(a) for a in trajectory.meta.get("prefix", ())]
    return prefix + [str(turn.action) for turn in trajectory.turns[:point] if executed(turn)]


def evolve(episodes: Sequence[Episode], pruned: dict[int, ReplayResult], ctx: RolloutContext,
           options: EvolutionOptions, counts: defaultdict[str, float]) -> list[Evolved]:
    """Build this iteration's evolved samples. `pruned` maps an episode's slot to the replay of its pruned
    sequence (won ones only are used). `counts` gets the evolution's metrics."""
    by_group: dict[int, list[Episode]] = defaultdict(list)
    for episode in episodes:
        if not episode.trajectory.meta.get("evolved"):
            by_group[episode.plan.group].append(episode)
    prune_jobs: list[tuple[int, Trajectory, ReplayResult]] = []
    branch_jobs: list[tuple[int, Trajectory, list[str]]] = []
    for group, members in sorted(by_group.items()):
        chosen = 0
        for strategy in options.strategies:
            if strategy == PRUNE:
                ready = [(len(pruned[e.slot].steps), e) for e in members
                         if e.slot in pruned and pruned[e.slot].won and not e.trajectory.meta.get("prefix")]
                counts["prune_candidates"] += len(ready)
                for _, episode in sorted(ready, key=lambda item: item[0]):
                    if chosen < options.max_per_group:
                        prune_jobs.append((group, episode.trajectory, pruned[episode.slot]))
                        chosen += 1
            elif strategy == BRANCH:
                for episode in members:
                    point = branch_point(episode.trajectory)
                    if point is None:
                        continue
                    prefix = branch_prefix(episode.trajectory, point)
                    if not prefix:
                        counts["branch_at_start"] += 1
                        continue
                    counts["branch_candidates"] += 1
                    if chosen < options.max_per_group:
                        branch_jobs.append((group, episode.trajectory, prefix))
                        chosen += 1
    pruned_samples = build_pruned(ctx, [(t, r) for _, t, r in prune_jobs], options, counts)
    branched_samples = build_branched(ctx, [(t, p) for _, t, p in branch_jobs], counts)
    groups = [job[0] for job in prune_jobs] + [job[0] for job in branch_jobs]
    out = [Evolved(g, t) for g, t in zip(groups, [*pruned_samples, *branched_samples], strict=True)]
    counts["evolved_pruned"] += len(prune_jobs)
    counts["evolved_branched"] += len(branch_jobs)
    counts["evolved_won"] += sum(e.trajectory.won for e in out)
    return out


# ------------------------------------------------------------------------------------------------------ prune
@dataclass
class _PrunedStep:
    """One kept action of a pruned sequence: the state it is taken in, its prompts and the turn it came from."""

    source: int
    original: Turn
    original_index: int
    observation: Observation
    prompt: list[int]
    think_prompt: list[int]
    replayed: ReplayStep


def build_pruned(ctx: RolloutContext, sources: Sequence[tuple[Trajectory, ReplayResult]], options: EvolutionOptions,
                 counts: defaultdict[str, float]) -> list[Trajectory]:
    """One evolved trajectory per (won episode, replay of its necessary steps); all think-only generations of all
    of them in one engine call, all scores in another."""
    if not sources:
        return []
    steps: list[_PrunedStep] = []
    for s, (trajectory, replay) in enumerate(sources):
        kept = [k for k, turn in enumerate(trajectory.turns)
                if executed(turn) and turn.info.get("necessity") == NECESSARY]
        seen = [replay.initial_observation, *(step.observation for step in replay.steps)]
        history: list[HistoryEntry] = []
        template = ctx.template_for(trajectory.task.env)
        for i, (step, k) in enumerate(zip(replay.steps, kept, strict=False)):
            observation = seen[i]
            prompt = render_turn_prompt(template, ctx.tokenizer, ctx.config, observation, history, i + 1,
                                        trajectory.task)
            think = render_turn_prompt(template, ctx.tokenizer, ctx.config, observation, history, i + 1,
                                       trajectory.task, instruction=template.think_only.format(action=step.action))
            steps.append(_PrunedStep(s, trajectory.turns[k], k, observation, prompt, think, step))
            history.append(HistoryEntry(observation.text, step.action))

    regenerated: list[Completion | None] = [None] * len(steps)
    if options.reasoning == "regenerate":
        sampling = replace(ctx.config.sampling, stop=[THINK_CLOSE], uncertainty=False)
        regenerated = list(ctx.generate([s.think_prompt for s in steps], sampling, extra=True))
    responses: list[tuple[list[int], str, bool]] = []
    for step, completion in zip(steps, regenerated, strict=True):
        composed = (compose_response(ctx.tokenizer, ctx.template_for(sources[step.source][0].task.env), completion,
                                     step.original)
                    if completion is not None else None)
        if composed is None:
            responses.append((list(step.original.response_ids), step.original.response_text, False))
            counts["reasoning_kept"] += 1
        else:
            responses.append((*composed, True))
            counts["reasoning_regenerated"] += 1
    scores = ctx.engine.score([s.prompt for s in steps], [ids for ids, _, _ in responses])

    trajectories = [Trajectory(task=t.task, rollout_index=-1, won=r.won,
                               meta={"evolved": PRUNE, "source_rollout": t.rollout_index, "source_steps": t.length})
                    for t, r in sources]
    for step, (ids, text, fresh), logprobs, completion in zip(steps, responses, scores, regenerated, strict=True):
        trajectory, replayed, observation = trajectories[step.source], step.replayed, step.observation
        trajectory.turns.append(Turn(
            prompt_ids=step.prompt, response_ids=ids, logprobs=list(logprobs), forced_mask=[False] * len(ids),
            response_text=text, action=replayed.action, valid=True, reward=replayed.reward,
            env_reward=replayed.reward, anchor=observation.anchor, observation=observation.text, done=replayed.done,
            info={**replayed.info, "executed": True, "parse_error": "",
                  "think_tokens": think_token_count(ctx.tokenizer, ids, text), "evolved": PRUNE,
                  "reasoning": "regenerated" if fresh else "original", "source_turn": step.original_index,
                  "necessity": NECESSARY, "necessity_by": BY_PRUNING},
            role=LossRole.ACTION))
        if completion is not None:
            trajectory.spans.append(Span.from_completion(completion, step.think_prompt, LossRole.NOT_TRAINED,
                                                         "think_only", turn_index=len(trajectory.turns) - 1,
                                                         used=fresh))
    return trajectories


def compose_response(tokenizer: Any, template: PromptTemplate, completion: Completion,
                     original: Turn) -> tuple[list[int], str] | None:
    """The regenerated reasoning's ids followed by the original action text's ids; None when the reasoning cannot
    be used as it is (see the module doc).

    The engine stops at `</think>` but returns the whole token that completed it: SmolLM2 writes `</think><action>`
    as `</`, `think`, `><`, ..., so the ids decode to `</think><`. Such extra characters are kept when they are the
    start of the action text (or whitespace) and only the rest of the action text is encoded; anything else is
    refused, so the trained text is exactly the reasoning plus the original action."""
    text = completion.text
    if not text.endswith(THINK_CLOSE) or THINK_CLOSE not in original.response_text:
        return None
    suffix = original.response_text.split(THINK_CLOSE, 1)[1]
    decoded = tokenizer.decode(completion.token_ids, skip_special_tokens=True)
    if not decoded.startswith(text):
        return None
    extra = decoded[len(text):]
    if suffix.startswith(extra):
        full, rest = text + suffix, suffix[len(extra):]
    elif not extra.strip():
        full, rest = decoded + suffix, suffix
    else:
        return None
    parsed = parse_response(full, None, template.action_tag, template.require_think)
    if not parsed.format_ok or parsed.think is None or not parsed.think.strip():
        return None
    original_parse = parse_response(original.response_text, None, template.action_tag, template.require_think)
    if parsed.action != original_parse.action:
        return None
    tail = list(tokenizer.encode(rest, add_special_tokens=False)) if rest else []
    eos = tokenizer.eos_token_id
    if eos is not None and original.response_ids and original.response_ids[-1] == eos:
        tail.append(eos)
    return list(completion.token_ids) + tail, full


# ----------------------------------------------------------------------------------------------------- branch
def build_branched(ctx: RolloutContext, sources: Sequence[tuple[Trajectory, list[str]]],
                   counts: defaultdict[str, float]) -> list[Trajectory]:
    """Play on from each branch point with the policy (one nested multi-turn run per remaining turn budget, every
    branch of a budget together); the episode's turn limit counts the replayed prefix."""
    if not sources:
        return []
    from agentforge.rollout.multi_turn import MultiTurnWorkflow  # imports the hooks module this one is used by

    out: list[Trajectory | None] = [None] * len(sources)
    budgets: dict[int, list[int]] = defaultdict(list)
    for i, (_, prefix) in enumerate(sources):
        budgets[max(1, ctx.config.max_turns - len(prefix))].append(i)
    for budget, members in sorted(budgets.items()):
        plans = [EpisodePlan(sources[i][0].task, rollout_index=-1, group=j, prefix=tuple(sources[i][1]),
                             meta={"evolved": BRANCH, "source_rollout": sources[i][0].rollout_index,
                                   "branch_at": len(sources[i][1])})
                 for j, i in enumerate(members)]
        nested = replace(ctx, config=replace(ctx.config, max_turns=budget))
        result = MultiTurnWorkflow(_FixedPlan(plans)).run(nested, [p.task for p in plans], group_size=1)
        _add_stats(ctx, result.stats)
        for j, i in enumerate(members):
            out[i] = result.groups[j].trajectories[0]
            for turn in out[i].turns:
                turn.info["evolved"] = BRANCH
    counts["branch_turns"] += sum(t.length for t in out if t is not None)
    return [t for t in out if t is not None]


class _FixedPlan(RolloutHooks):
    """Rollout hooks that play exactly the given plans (the default hooks otherwise)."""

    name = "trajevolve_branch"

    def __init__(self, plans: list[EpisodePlan]) -> None:
        self.plans = plans

    def plan(self, tasks: Sequence[Task], group_size: int) -> list[EpisodePlan]:
        return list(self.plans)


def _add_stats(ctx: RolloutContext, stats: RolloutStats) -> None:
    """A nested run's generations and env steps count in the iteration's throughput."""
    for name in ("generated_tokens", "generate_seconds", "env_steps", "env_seconds", "turns", "regenerated_turns"):
        setattr(ctx.stats, name, getattr(ctx.stats, name) + getattr(stats, name))
