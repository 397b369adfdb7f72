"""Vectorised building blocks for group-relative advantages.

Every algorithm works on a `TurnBatch`: flat numpy arrays over all turns of all groups, built once from the
`Group`/`Trajectory`/`Turn` objects. Flat order is the iteration order

    for group in groups: for trajectory in group.trajectories: for turn in trajectory.turns

so the turns of one trajectory (and the trajectories of one group) are contiguous, and an advantage array returned
by an algorithm lines up with that loop. Group statistics are segment reductions (`np.bincount`), discounted
returns a backward sweep over "turns left to the end" levels: no Python loop per turn after the build.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from agentforge.errors import AgentforgeError
from agentforge.types import Group, Turn


def iter_turns(groups: Sequence[Group]) -> Iterator[Turn]:
    """Turns in flat order: the order of every per-turn array in this package."""
    for group in groups:
        for trajectory in group.trajectories:
            yield from trajectory.turns


@dataclass
class TurnBatch:
    """Flat per-turn arrays (length N = number of turns) plus per-trajectory arrays (length n_traj).

    Per turn: `group_id`, `traj_id` (global trajectory index), `turn_index` (0-based within its trajectory),
    `reward` (`Turn.reward`: env reward after the invalid-action penalty), `anchor_id` (id of the turn's exact anchor
    within its group, 0.. in order of first appearance), `step_id` (global id of the (group, anchor) pair),
    `traj_return` (its trajectory's return, broadcast), and `anchors` (the raw anchor objects, for similarity
    grouping), `tokens` (the turn's sampled, trained response tokens: what a token-level statistic weighs it by).
    Per trajectory: `traj_group`, `traj_returns` (sum of `Turn.reward`), `traj_length`.
    Trajectories without turns are kept in the per-trajectory arrays (they are rollouts of the group with return 0)
    but have no turn samples.
    """

    group_id: np.ndarray
    traj_id: np.ndarray
    turn_index: np.ndarray
    reward: np.ndarray
    anchor_id: np.ndarray
    step_id: np.ndarray
    traj_return: np.ndarray
    anchors: list[Hashable]
    traj_group: np.ndarray
    traj_returns: np.ndarray
    traj_length: np.ndarray
    n_groups: int
    n_steps: int
    has_none_anchor: bool
    tokens: np.ndarray | None = None

    @property
    def n_turns(self) -> int:
        return int(self.reward.size)

    @property
    def n_trajectories(self) -> int:
        return int(self.traj_length.size)

    @classmethod
    def from_groups(cls, groups: Sequence[Group]) -> TurnBatch:
        """Build the flat arrays; the only per-turn Python loop of an advantage computation lives here."""
        rewards: list[float] = []
        tokens: list[int] = []
        anchors: list[Hashable] = []
        anchor_ids: list[int] = []
        traj_group: list[int] = []
        traj_length: list[int] = []
        anchors_per_group: list[int] = []
        has_none_anchor = False
        for g, group in enumerate(groups):
            ids: dict[Hashable, int] = {}
            for trajectory in group.trajectories:
                turns = trajectory.turns
                traj_group.append(g)
                traj_length.append(len(turns))
                traj_anchors = [turn.anchor for turn in turns]
                rewards.extend([turn.reward for turn in turns])
                tokens.extend([len(turn.response_ids) - sum(map(bool, turn.forced_mask)) for turn in turns])
                anchors.extend(traj_anchors)
                try:
                    anchor_ids.extend([ids.setdefault(a, len(ids)) for a in traj_anchors])
                except TypeError as err:
                    raise AgentforgeError(
                        f"a turn of {group.task.describe()} has an unhashable anchor ({err}); the env must give "
                        "Observation.anchor as a hashable value (str, bytes, tuple): convert arrays with .tobytes()"
                    ) from err
            has_none_anchor = has_none_anchor or None in ids
            anchors_per_group.append(len(ids))

        reward = np.asarray(rewards, dtype=np.float64)
        lengths = np.asarray(traj_length, dtype=np.int64)
        groups_of_traj = np.asarray(traj_group, dtype=np.int64)
        n_traj = lengths.size
        _check_finite(reward, groups, lengths)

        traj_id = np.repeat(np.arange(n_traj, dtype=np.int64), lengths)
        starts = np.cumsum(lengths) - lengths
        turn_index = np.arange(reward.size, dtype=np.int64) - starts[traj_id]
        group_id = groups_of_traj[traj_id]
        traj_returns = np.bincount(traj_id, weights=reward, minlength=n_traj).astype(np.float64)
        anchor_id = np.asarray(anchor_ids, dtype=np.int64)
        anchor_offset = np.cumsum(anchors_per_group, dtype=np.int64) - np.asarray(anchors_per_group, dtype=np.int64)
        return cls(
            group_id=group_id,
            traj_id=traj_id,
            turn_index=turn_index,
            reward=reward,
            anchor_id=anchor_id,
            step_id=anchor_offset[group_id] + anchor_id,
            traj_return=traj_returns[traj_id],
            anchors=anchors,
            traj_group=groups_of_traj,
            traj_returns=traj_returns,
            traj_length=lengths,
            n_groups=len(groups),
            n_steps=int(sum(anchors_per_group)),
            has_none_anchor=has_none_anchor,
            tokens=np.asarray(tokens, dtype=np.int64),
        )

    def per_trajectory(self, values: np.ndarray) -> list[np.ndarray]:
        """Split a flat per-turn array into one array per trajectory (in flat order)."""
        return np.split(np.asarray(values), np.cumsum(self.traj_length)[:-1])


def _check_finite(reward: np.ndarray, groups: Sequence[Group], lengths: np.ndarray) -> None:
    if np.isfinite(reward).all():
        return
    bad = int(np.flatnonzero(~np.isfinite(reward))[0])
    traj = int(np.searchsorted(np.cumsum(lengths), bad, side="right"))
    turn = bad - int(np.cumsum(lengths)[traj] - lengths[traj])
    trajectories = [t for g in groups for t in g.trajectories]
    raise AgentforgeError(
        f"turn {turn} of rollout {trajectories[traj].rollout_index} of {trajectories[traj].task.describe()} has "
        f"reward {reward[bad]}; rewards must be finite numbers: fix the env's reward (or the invalid-action penalty)"
    )


@dataclass
class SegmentStats:
    """Per-segment count, mean, unbiased std (0 for fewer than 2 members) and whether all members are equal."""

    count: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    constant: np.ndarray


def segment_stats(values: np.ndarray, segment_ids: np.ndarray, n_segments: int) -> SegmentStats:
    """Mean and unbiased (n − 1) std of `values` per segment id, two-pass for numerical stability."""
    values = np.asarray(values, dtype=np.float64)
    count = np.bincount(segment_ids, minlength=n_segments)
    sums = np.bincount(segment_ids, weights=values, minlength=n_segments)
    mean = np.divide(sums, count, out=np.zeros(n_segments), where=count > 0)
    deviation = values - mean[segment_ids]
    squares = np.bincount(segment_ids, weights=deviation * deviation, minlength=n_segments)
    var = np.divide(squares, count - 1, out=np.zeros(n_segments), where=count > 1)
    lowest = np.full(n_segments, np.inf)
    highest = np.full(n_segments, -np.inf)
    np.minimum.at(lowest, segment_ids, values)
    np.maximum.at(highest, segment_ids, values)
    return SegmentStats(count=count, mean=mean, std=np.sqrt(var), constant=lowest >= highest)


def group_relative(
    values: np.ndarray,
    segment_ids: np.ndarray,
    n_segments: int,
    *,
    norm_by_std: bool,
    epsilon: float,
) -> np.ndarray:
    """(x − mean_s) [/ (std_s + ε)] per element, with exact 0 for singleton segments and all-equal segments.

    The exact zero (rather than a rounding residue of `x − mean`) lets later stages recognise groups that carry no
    learning signal.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return np.zeros(0)
    stats = segment_stats(values, segment_ids, n_segments)
    advantage = values - stats.mean[segment_ids]
    if norm_by_std:
        advantage /= stats.std[segment_ids] + epsilon
    no_signal = (stats.count <= 1) | stats.constant
    advantage[no_signal[segment_ids]] = 0.0
    return advantage


def discounted_returns(rewards: np.ndarray, traj_length: np.ndarray, gamma: float) -> np.ndarray:
    """G_t = Σ_k γ^k r_{t+k} within each trajectory; trajectories are contiguous runs of `traj_length` turns.

    Works level by level on "turns left until the trajectory ends" (0, 1, 2, ...): each level is one vectorised
    update G_t = r_t + γ·G_{t+1}, so the loop runs max(length) times, not once per turn, and it is the exact
    recursion (no γ^−t rescaling that would lose precision on long trajectories).
    """
    returns = np.array(rewards, dtype=np.float64, copy=True)
    if returns.size == 0:
        return returns
    lengths = np.asarray(traj_length, dtype=np.int64)
    ends = np.cumsum(lengths)
    traj_id = np.repeat(np.arange(lengths.size), lengths)
    turns_left = ends[traj_id] - 1 - np.arange(returns.size)
    order = np.argsort(turns_left, kind="stable")
    bounds = np.cumsum(np.bincount(turns_left))
    for level in range(1, bounds.size):
        idx = order[bounds[level - 1] : bounds[level]]
        returns[idx] += gamma * returns[idx + 1]
    return returns
