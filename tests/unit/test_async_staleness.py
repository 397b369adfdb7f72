"""The staleness accounting of asynchronous training: a turn counts as its oldest token for the bound, each token
as the version that sampled it for the per-token lag, and a group with any turn beyond the bound is dropped."""

from __future__ import annotations

from agentforge.training.asynchronous import staleness, token_lags
from agentforge.types import Group, Task, Trajectory, Turn


def turn(n: int, version: int, switches: list[list[int]] | None = None) -> Turn:
    info = {"learner_version": version}
    if switches:
        info.update(policy_version_switches=switches, learner_version_switches=switches)
    return Turn(list(range(3)), list(range(n)), [0.0] * n, [False] * n, "x", "a", True, 0.0, 0.0, "s", "o",
                info=info)


def group(*turns: Turn) -> Group:
    task = Task("sokoban", 0)
    return Group(task, [Trajectory(task, 0, list(turns))])


def test_each_token_lags_by_the_version_that_sampled_it():
    assert token_lags(turn(4, 3), 5) == [2, 2, 2, 2]
    assert token_lags(turn(6, 3, [[2, 4], [4, 5]]), 5) == [2, 2, 1, 1, 0, 0]


def test_a_turn_spanning_versions_counts_as_its_oldest_for_the_bound():
    kept, metrics = staleness([group(turn(4, 4, [[2, 5]])), group(turn(4, 3, [[1, 5]]))], 5, 1)
    assert len(kept) == 1 and metrics["async/dropped_groups"] == 1  # the second began at lag 2 > k
    assert metrics["async/staleness_max"] == 1 and metrics["async/turns_spanning_versions"] == 1
    assert metrics["async/token_staleness_mean"] == 0.5  # two tokens at lag 1, two at lag 0
