"""Rollout metrics: what a summary, a progress bar and the logger report about a batch of groups."""

from __future__ import annotations

from agentforge.rollout.workflow import RolloutStats
from agentforge.types import Group


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, 0 for an empty denominator (a count of nothing)."""
    return float(numerator) / denominator if denominator else 0.0


def episode_outcomes(groups: list[Group]) -> dict[str, list[bool]]:
    """Per task key, whether each played episode won (evolved samples left out): what paired comparisons use."""
    outcomes: dict[str, list[bool]] = {}
    for group in groups:
        played = [bool(t.won) for t in group.trajectories if not t.meta.get("evolved")]
        outcomes.setdefault(group.task.key, []).extend(played)
    return outcomes


def rollout_summary(groups: list[Group], stats: RolloutStats,
                    workflow_metrics: dict[str, float] | None = None) -> dict[str, float]:
    """Success rate, mean return, mean turns, invalid-action rate and throughput of one rollout; plus, when a
    workflow made any, the turns it regenerated and its generations outside the turns, and its hooks' own metrics.
    Evolved samples (TrajEvolve: built from played episodes, `meta["evolved"]`) are trained but not counted here:
    the numbers describe the episodes the policy played."""
    trajectories = [t for g in groups for t in g.trajectories if not t.meta.get("evolved")]
    turns = sum(t.length for t in trajectories)
    summary = {
        "episodes": len(trajectories),
        "success_rate": ratio(sum(t.won for t in trajectories), len(trajectories)),
        "mean_return": ratio(sum(t.episode_return for t in trajectories), len(trajectories)),
        "mean_turns": ratio(turns, len(trajectories)),
        "mean_success_length": ratio(sum(t.length for t in trajectories if t.won), sum(t.won for t in trajectories)),
        "invalid_action_rate": ratio(sum(t.invalid_turns for t in trajectories), turns),
        # efficiency (T2PO's report, for every algorithm): the kept turns' generated tokens of a successful
        # trajectory, thinking tokens per turn, turns with forced tokens (T2PO: TTI fired), regenerations per turn
        "tokens_per_success": ratio(sum(t.response_tokens for t in trajectories if t.won),
                                     sum(t.won for t in trajectories)),
        "think_tokens_per_turn": ratio(sum(turn.info.get("think_tokens", 0) for t in trajectories
                                            for turn in t.turns), turns),
        "forced_turn_rate": ratio(sum(any(turn.forced_mask) for t in trajectories for turn in t.turns), turns),
        "regeneration_rate": ratio(stats.regenerated_turns, stats.turns),
        # replies cut by max_new_tokens without a valid action: counted here, not as format errors
        "truncated_turn_rate": ratio(sum(bool(turn.info.get("truncated")) for t in trajectories for turn in t.turns),
                                     turns),
        "generated_tokens": stats.generated_tokens,
        "generated_tokens_per_s": ratio(stats.generated_tokens, stats.generate_seconds),
        "env_steps": stats.env_steps,
        "env_steps_per_s": ratio(stats.env_steps, stats.env_seconds),
        "wall_seconds": stats.wall_seconds,
    }
    if not any(t.won for t in trajectories):  # means over no success are undefined, not 0: left out ("–" in tables)
        del summary["mean_success_length"], summary["tokens_per_success"]
    if stats.overlapped:  # per-episode: env steps ran beside generation; the driver's time in env calls says nothing
        del summary["env_steps_per_s"]
        summary["idle_seconds"] = stats.idle_seconds
    if stats.regenerated_turns:
        summary["regenerated_turns"] = stats.regenerated_turns
    if stats.extra_generations:
        summary["extra_generations"] = stats.extra_generations
    ended = sum(t.meta.get("truncated") == "context_limit" for t in trajectories)
    if ended or stats.context_limit_ends:  # agent.history=conversation: episodes ended at the context limit
        summary["context_limit_rate"] = ratio(ended, len(trajectories))
    summary.update(summary_metrics(trajectories))
    summary.update(per_env_summary(trajectories))
    summary.update(per_side_summary(trajectories))
    summary.update(workflow_metrics or {})
    return summary


def summary_metrics(trajectories: list) -> dict[str, float]:
    """`agent.history=summary`: how often the policy summarised, at what conversation length, how long its summaries
    were (absent when no episode summarised)."""
    made = [s for t in trajectories for s in t.spans if s.kind == "summary"]
    if not made:
        return {}
    return {"summaries_per_episode": ratio(len(made), len(trajectories)),
            "summarised_episode_rate": ratio(sum(any(s.kind == "summary" for s in t.spans) for t in trajectories),
                                             len(trajectories)),
            "summary_at_tokens": ratio(sum(int(s.info.get("at_tokens", 0)) for s in made), len(made)),
            "summary_tokens": ratio(sum(len(s.response_ids) for s in made), len(made))}


def per_env_summary(trajectories: list) -> dict[str, float]:
    """`<env>/success`, `<env>/mean_return`, `<env>/episodes` per env when the trajectories come from more than one
    (a mixed-env run, `env=mix`): one env's progress is not hidden in the mean over all."""
    by_env: dict[str, list] = {}
    for t in trajectories:
        by_env.setdefault(t.task.env, []).append(t)
    if len(by_env) < 2:
        return {}
    out: dict[str, float] = {}
    for env, items in sorted(by_env.items()):
        out[f"{env}/success"] = ratio(sum(t.won for t in items), len(items))
        out[f"{env}/mean_return"] = ratio(sum(t.episode_return for t in items), len(items))
        out[f"{env}/episodes"] = len(items)
    return out


def per_side_summary(trajectories: list) -> dict[str, float]:
    """`player<k>/win_rate` and `player<k>/mean_return` per side of self-play games (trajectories split per side,
    `rollout.sides`): `success_rate` then averages the sides' wins, half the decisive-game rate in a two-player
    game, and says nothing about which side learns."""
    by_side: dict[int, list] = {}
    for t in trajectories:
        if "player" in t.meta:
            by_side.setdefault(int(t.meta["player"]), []).append(t)
    out: dict[str, float] = {}
    for side, items in sorted(by_side.items()):
        out[f"player{side}/win_rate"] = ratio(sum(t.won for t in items), len(items))
        out[f"player{side}/mean_return"] = ratio(sum(t.episode_return for t in items), len(items))
    return out
