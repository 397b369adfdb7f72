"""Advantage estimators chosen by name: turn-level advantages of a `TurnBatch` (verl's `register_adv_est`).

An estimator is `fn(batch, options) -> Advantages`: `options` is any object with the attributes it reads (an
algorithm's config dataclass), the result one float per turn in flat `iter_turns` order plus a few scalars worth
logging. An `Algorithm` names its estimator (`Algorithm.estimator`) and the base class calls it, so a new
group-relative method is one registration here and a config class; a plugin registers its own or is reached as
`pkg.mod:fn`. The token-level estimator (GAE with a critic's values) is `objective.gae`: it reads the sampled
tokens, not turns.

- `grpo`: A(τ_i) = (R_i − mean_g R) / (std_g R + ε) over the group's trajectories, broadcast to every turn
  (options `norm_by_std`, `epsilon`; `norm_by_std: false` is Dr. GRPO).
- `rloo`: A(τ_i) = R_i − mean of the group's other returns (Ahmadian et al. 2024; verl's `rloo`), broadcast.
- `reinforce_plus_plus`: each turn's discounted return-to-go G_t (γ per turn, option `gamma`), whitened over the
  batch's trained tokens (Hu 2025, REINFORCE++; verl's `reinforce_plus_plus`: token-level returns, `masked_whiten`).
- `reinforce_plus_plus_baseline`: R_i − mean_g R, broadcast, whitened over the batch's trained tokens (verl's
  `reinforce_plus_plus_baseline`).
- `gigpo`: A = A_E + ω·A_S: the episode part over the group (trajectories or turn samples, `episode_stats`) plus
  the step part over turns that share an anchor state, from discounted returns (options `step_weight`, `gamma`,
  `mode`, `episode_stats`, `similarity_threshold`, `epsilon`). See `algorithms.gigpo.GiGPO` for the edge cases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentforge.errors import AgentforgeError
from agentforge.objective.turns import TurnBatch, discounted_returns, group_relative, segment_stats
from agentforge.registry import Registry


@dataclass
class Advantages:
    per_turn: np.ndarray  # float64, flat iter_turns order
    metrics: dict[str, float] = field(default_factory=dict)


AdvantageEstimator = Callable[[TurnBatch, Any], Advantages]
ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")


@ADVANTAGE_ESTIMATORS.register("grpo")
def outcome_group_relative(batch: TurnBatch, options: Any) -> Advantages:
    per_traj = group_relative(batch.traj_returns, batch.traj_group, batch.n_groups,
                              norm_by_std=bool(options.norm_by_std), epsilon=float(options.epsilon))
    advantages = per_traj[batch.traj_id]
    return Advantages(advantages, _outcome_metrics(batch, advantages))


def _outcome_metrics(batch: TurnBatch, advantages: np.ndarray) -> dict[str, float]:
    if batch.n_groups == 0 or batch.n_turns == 0:
        return {"adv_mean": 0.0, "adv_abs_mean": 0.0, "groups_no_signal_fraction": 0.0}
    stats = segment_stats(batch.traj_returns, batch.traj_group, batch.n_groups)
    present = stats.count > 0
    no_signal = (stats.count <= 1) | stats.constant
    return {
        "adv_mean": float(advantages.mean()),
        "adv_abs_mean": float(np.abs(advantages).mean()),
        "groups_no_signal_fraction": float(no_signal[present].mean()),
    }


@ADVANTAGE_ESTIMATORS.register("rloo")
def leave_one_out(batch: TurnBatch, options: Any) -> Advantages:
    """R_i − (Σ_g R − R_i)/(n − 1); a group of one gets 0 (verl gives it its raw score: no baseline, no signal here,
    as GRPO's singletons)."""
    sums = np.bincount(batch.traj_group, weights=batch.traj_returns, minlength=batch.n_groups)
    sizes = np.bincount(batch.traj_group, minlength=batch.n_groups)
    n = sizes[batch.traj_group]
    others = np.divide(sums[batch.traj_group] - batch.traj_returns, n - 1, out=np.zeros(n.shape), where=n > 1)
    per_traj = np.where(n > 1, batch.traj_returns - others, 0.0)
    advantages = per_traj[batch.traj_id]
    return Advantages(advantages, _outcome_metrics(batch, advantages))


def whiten_by_tokens(values: np.ndarray, tokens: np.ndarray, epsilon: float = 1e-8) -> np.ndarray:
    """Per-turn values whitened as their tokens would be (verl's `masked_whiten`: the token-weighted mean, the
    unbiased token-weighted variance, (x − mean)/sqrt(var + ε))."""
    values, weights = np.asarray(values, np.float64), np.asarray(tokens, np.float64)
    n = weights.sum()
    if values.size == 0 or n < 2:
        return values - (np.average(values, weights=weights) if n > 0 else 0.0)
    mean = np.average(values, weights=weights)
    variance = np.average((values - mean) ** 2, weights=weights) * n / (n - 1)
    return (values - mean) / np.sqrt(variance + epsilon)


def _token_weights(batch: TurnBatch) -> np.ndarray:
    return batch.tokens if batch.tokens is not None else np.ones(batch.n_turns, np.int64)


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus")
def whitened_returns(batch: TurnBatch, options: Any) -> Advantages:
    returns = discounted_returns(batch.reward, batch.traj_length, float(options.gamma))
    advantages = whiten_by_tokens(returns, _token_weights(batch))
    return Advantages(advantages, {"adv_mean": float(advantages.mean()) if advantages.size else 0.0,
                                   "adv_abs_mean": float(np.abs(advantages).mean()) if advantages.size else 0.0})


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus_baseline")
def whitened_group_baseline(batch: TurnBatch, options: Any) -> Advantages:
    sums = np.bincount(batch.traj_group, weights=batch.traj_returns, minlength=batch.n_groups)
    sizes = np.bincount(batch.traj_group, minlength=batch.n_groups)
    means = np.divide(sums, sizes, out=np.zeros(batch.n_groups), where=sizes > 1)  # verl: a group of one, mean 0
    centred = (batch.traj_returns - means[batch.traj_group])[batch.traj_id]
    advantages = whiten_by_tokens(centred, _token_weights(batch))
    return Advantages(advantages, _outcome_metrics(batch, advantages))


@ADVANTAGE_ESTIMATORS.register("gigpo")
def episode_and_step_group_relative(batch: TurnBatch, options: Any) -> Advantages:
    episode = episode_advantages(batch, options)
    if options.step_weight == 0:
        step = np.zeros_like(episode)
        step_ids, n_steps = batch.step_id, batch.n_steps
    else:
        step_ids, n_steps = step_groups(batch, options.similarity_threshold)
        step = step_advantages(batch, step_ids, n_steps, options)
    advantages = episode + float(options.step_weight) * step
    return Advantages(advantages, _step_metrics(episode, step, advantages, step_ids, n_steps))


def episode_advantages(batch: TurnBatch, options: Any) -> np.ndarray:
    """GiGPO's A_E per turn (flat order): group-relative over trajectories, or over turn samples (`turn`)."""
    norm = options.mode == "mean_std_norm"
    eps = float(options.epsilon)
    if options.episode_stats == "trajectory":
        per_traj = group_relative(batch.traj_returns, batch.traj_group, batch.n_groups, norm_by_std=norm,
                                  epsilon=eps)
        return per_traj[batch.traj_id]
    return group_relative(batch.traj_return, batch.group_id, batch.n_groups, norm_by_std=norm, epsilon=eps)


def step_groups(batch: TurnBatch, similarity_threshold: float | None) -> tuple[np.ndarray, int]:
    """Global step-group id per turn and their count: exact anchors, or merged by text similarity."""
    if batch.has_none_anchor:
        raise AgentforgeError(
            "GiGPO groups turns by Observation.anchor, but some turns have anchor None; the env must give a "
            "hashable raw state (text, or a grid's bytes) as the anchor, or set algorithm.step_weight=0"
        )
    if similarity_threshold is None:
        return batch.step_id, batch.n_steps
    return similar_step_groups(batch, float(similarity_threshold))


def step_advantages(batch: TurnBatch, step_ids: np.ndarray, n_steps: int, options: Any) -> np.ndarray:
    """GiGPO's A_S per turn (flat order) from discounted returns within each step group."""
    returns = discounted_returns(batch.reward, batch.traj_length, float(options.gamma))
    return group_relative(returns, step_ids, n_steps, norm_by_std=options.mode == "mean_std_norm",
                          epsilon=float(options.epsilon))


def similar_step_groups(batch: TurnBatch, threshold: float) -> tuple[np.ndarray, int]:
    """Merge a group's exact step groups whose text anchors are similar (greedy, first matching representative).

    Works on distinct anchors (exact duplicates are already one step group), in order of first appearance, which
    is the order of `batch.step_id` within a group.
    """
    from rapidfuzz import fuzz

    if batch.n_steps == 0:
        return batch.step_id, 0
    first_turn = np.full(batch.n_steps, batch.n_turns, dtype=np.int64)
    np.minimum.at(first_turn, batch.step_id, np.arange(batch.n_turns, dtype=np.int64))
    step_group = batch.group_id[first_turn].tolist()
    cutoff = threshold * 100.0
    merged = np.empty(batch.n_steps, dtype=np.int64)
    representatives: list[tuple[str, int]] = []
    current_group = -1
    next_id = 0
    for step, turn in enumerate(first_turn.tolist()):
        if step_group[step] != current_group:
            current_group, representatives = step_group[step], []
        anchor = batch.anchors[turn]
        match = -1
        if isinstance(anchor, str):
            for text, rep_id in representatives:
                if fuzz.ratio(anchor, text, score_cutoff=cutoff) >= cutoff:
                    match = rep_id
                    break
        if match < 0:
            match, next_id = next_id, next_id + 1
            if isinstance(anchor, str):
                representatives.append((anchor, match))
        merged[step] = match
    return merged[batch.step_id], next_id


def _step_metrics(episode: np.ndarray, step: np.ndarray, advantages: np.ndarray, step_ids: np.ndarray,
                  n_steps: int) -> dict[str, float]:
    if advantages.size == 0:
        return {"adv_mean": 0.0, "adv_episode_abs_mean": 0.0, "adv_step_abs_mean": 0.0, "step_groups": 0.0,
                "step_group_size_mean": 0.0, "step_singleton_turn_fraction": 0.0}
    sizes = np.bincount(step_ids, minlength=n_steps)
    used = sizes[sizes > 0]
    return {
        "adv_mean": float(advantages.mean()),
        "adv_episode_abs_mean": float(np.abs(episode).mean()),
        "adv_step_abs_mean": float(np.abs(step).mean()),
        "step_groups": float(used.size),
        "step_group_size_mean": float(used.mean()),
        "step_singleton_turn_fraction": float((sizes[step_ids] == 1).mean()),
    }
