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


def test_versions_count_pushes_and_a_stall_is_reported_every_three_iterations(caplog):
    from agentforge.training.asynchronous import oldest_lag
    from agentforge.training.updates import STALL_ITERATIONS, UpdateLedger

    ledger = UpdateLedger()
    with caplog.at_level("WARNING", logger="agentforge.training.trainer"):
        said = [ledger.record(i, updated) for i, updated in enumerate([True, False, False, False, False, False,
                                                                       False, True], start=1)]
    assert ledger.version == 2 and ledger.untrained == [2, 3, 4, 5, 6, 7] and ledger.streak == 0
    assert [i + 1 for i, message in enumerate(said) if message] == [4, 7]  # after 3 and 6 in a row
    assert said[3].startswith(f"iterations 2-4: {STALL_ITERATIONS} iterations in a row trained nothing")
    assert len([r for r in caplog.records if "trained nothing" in r.getMessage()]) == 2
    assert ledger.summary_line(8) == "6 of 8 iterations trained nothing (iterations 2, 3, 4, 5, 6, 7)"
    assert ledger.metrics() == {"train/iterations_without_update": 0.0, "train/weight_version": 2.0}
    again = UpdateLedger()
    again.load_state_dict(ledger.state_dict(), iteration=8)
    assert again == ledger
    old = UpdateLedger()
    old.load_state_dict({"sampler": {}}, iteration=5)  # a checkpoint from before: one version per iteration
    assert (old.version, old.untrained, old.summary_line(5)) == (5, [], None)
    assert oldest_lag([group(turn(2, 3)), group(turn(2, 1))], 4) == 3 and oldest_lag([], 4) == 0
