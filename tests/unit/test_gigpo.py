"""GiGPO advantages against hand-worked numbers and a plain-loop reference implementation."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Hashable, Sequence

import numpy as np
import pytest

from agentforge.algorithms import GiGPO, discounted_returns
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.types import Group, Task, Trajectory, Turn

pytestmark = pytest.mark.unit

EPS = 1e-6
ROOM = "You are in the middle of a room. Looking around you, you see a cabinet 1, a drawer 1, and a sinkbasin 1."


def make_turn(reward: float, anchor: Hashable) -> Turn:
    """A Turn with only what advantages read set meaningfully; `reward` is already penalised."""
    return Turn(prompt_ids=[1], response_ids=[2, 3], logprobs=[-0.2, -0.3], forced_mask=[False, False],
                response_text="<action>a", action="a", valid=True, reward=reward, env_reward=reward, anchor=anchor,
                observation=str(anchor))


def make_group(trajectories: Sequence[Sequence[tuple[float, Hashable]]], seed: int = 0) -> Group:
    """One group; each trajectory is a list of (reward, anchor) per turn."""
    task = Task(env="test", seed=seed)
    return Group(task=task, trajectories=[
        Trajectory(task=task, rollout_index=i, turns=[make_turn(r, a) for r, a in turns])
        for i, turns in enumerate(trajectories)
    ])


def test_discounted_returns_of_a_three_turn_trajectory():
    # rewards (0, -0.1, 1): G3 = 1; G2 = -0.1 + 0.95 * 1 = 0.85; G1 = 0 + 0.95 * 0.85 = 0.8075
    returns = discounted_returns(np.array([0.0, -0.1, 1.0, 2.0, 0.5]), np.array([3, 0, 2]), 0.95)
    assert returns.tolist() == pytest.approx([0.8075, 0.85, 1.0, 2.475, 0.5], abs=1e-12)
    assert discounted_returns(np.zeros(0), np.array([0]), 0.95).shape == (0,)


def test_singleton_step_groups_leave_only_the_episode_part():
    group = make_group([[(0.0, "a"), (1.0, "b")], [(0.0, "c")]])
    algo = GiGPO()
    # returns 1 and 0, mean 0.5; every anchor is unique, so A_S = 0
    assert algo.advantages([group]).tolist() == pytest.approx([0.5, 0.5, -0.5], abs=1e-12)
    assert algo.last_metrics["step_singleton_turn_fraction"] == 1.0


def test_all_equal_rewards_give_exact_zero():
    # identical trajectories: equal returns, and each step group holds equal discounted returns
    group = make_group([[(0.5, "a"), (0.5, "b")], [(0.5, "a"), (0.5, "b")], [(0.5, "a"), (0.5, "b")]])
    for mode in ("mean_norm", "mean_std_norm"):
        for stats in ("trajectory", "turn"):
            assert GiGPO(mode=mode, episode_stats=stats).advantages([group]).tolist() == [0.0] * 6
    # equal returns, but "a" recurs at different distances from the end: only the step part is non-zero
    loop = make_group([[(0.5, "a"), (0.5, "a")], [(0.5, "a"), (0.5, "a")]])
    # G = (0.5 + 0.95 * 0.5, 0.5) = (0.975, 0.5) in both; step group "a" mean 0.7375
    assert GiGPO().advantages([loop]).tolist() == pytest.approx([0.2375, -0.2375] * 2, abs=1e-12)


def test_anchor_repeated_across_timesteps_and_trajectories():
    group = make_group([[(0.0, "A"), (0.0, "B"), (1.0, "A")], [(0.0, "A"), (0.0, "C")]])
    adv = GiGPO().advantages([group])
    # A_E: returns (1, 0) -> +0.5, -0.5.
    # G: traj 1 = (0.95^2, 0.95, 1) = (0.9025, 0.95, 1.0); traj 2 = (0, 0).
    # step group "A" = {0.9025, 1.0, 0.0}, mean 0.6341667; "B", "C" singletons -> 0.
    mean_a = (0.9025 + 1.0 + 0.0) / 3
    expected = [0.5 + 0.9025 - mean_a, 0.5, 0.5 + 1.0 - mean_a, -0.5 + 0.0 - mean_a, -0.5]
    assert adv.tolist() == pytest.approx(expected, abs=1e-12)
    assert adv.tolist() == pytest.approx([0.768333, 0.5, 0.865833, -1.134167, -0.5], abs=1e-6)


def test_mean_std_norm_standardises_both_parts():
    group = make_group([[(0.0, "A"), (0.0, "B"), (1.0, "A")], [(0.0, "A"), (0.0, "C")]])
    adv = GiGPO(mode="mean_std_norm").advantages([group])
    std_e = math.sqrt(0.5)  # returns (1, 0)
    mean_a = (0.9025 + 1.0) / 3
    std_a = math.sqrt(((0.9025 - mean_a) ** 2 + (1.0 - mean_a) ** 2 + mean_a**2) / 2)
    assert std_a == pytest.approx(statistics.stdev([0.9025, 1.0, 0.0]))
    e_pos, e_neg = 0.5 / (std_e + EPS), -0.5 / (std_e + EPS)
    expected = [e_pos + (0.9025 - mean_a) / (std_a + EPS), e_pos, e_pos + (1.0 - mean_a) / (std_a + EPS),
                e_neg - mean_a / (std_a + EPS), e_neg]
    assert adv.tolist() == pytest.approx(expected, abs=1e-12)


def test_episode_stats_turn_weighs_long_trajectories_more():
    # traj 1: 3 turns, return 1; traj 2: 1 turn, return 0. Unique anchors -> A_S = 0.
    group = make_group([[(0.0, "a"), (0.0, "b"), (1.0, "c")], [(0.0, "d")]])
    by_traj = GiGPO(episode_stats="trajectory").advantages([group])
    by_turn = GiGPO(episode_stats="turn").advantages([group])
    assert by_traj.tolist() == pytest.approx([0.5, 0.5, 0.5, -0.5], abs=1e-12)
    # turn samples (1, 1, 1, 0): mean 0.75
    assert by_turn.tolist() == pytest.approx([0.25, 0.25, 0.25, -0.75], abs=1e-12)
    # unbiased std of (1, 1, 1, 0): sqrt((3 * 0.25^2 + 0.75^2) / 3) = 0.5
    std_turn = GiGPO(episode_stats="turn", mode="mean_std_norm").advantages([group])
    assert std_turn.tolist() == pytest.approx([0.25 / 0.500001] * 3 + [-0.75 / 0.500001], abs=1e-12)


def test_step_weight_scales_the_step_part():
    group = make_group([[(1.0, "s")], [(0.0, "s")]])
    # A_E = (0.5, -0.5); step group "s" = {1, 0}: A_S = (0.5, -0.5)
    assert GiGPO(step_weight=1.0).advantages([group]).tolist() == pytest.approx([1.0, -1.0])
    assert GiGPO(step_weight=0.0).advantages([group]).tolist() == pytest.approx([0.5, -0.5])
    assert GiGPO(step_weight=2.0).advantages([group]).tolist() == pytest.approx([1.5, -1.5])


def test_gamma_is_configurable():
    group = make_group([[(0.0, "s"), (1.0, "t")], [(0.0, "s")]])
    # gamma 0.5: G of "s" members = (0.5, 0); A_S = (0.25, -0.25); A_E = (0.5, -0.5)
    assert GiGPO(gamma=0.5).advantages([group]).tolist() == pytest.approx([0.75, 0.5, -0.75])


def test_bytes_anchors():
    grid_a = np.array([[0, 1], [2, 3]], dtype=np.uint8).tobytes()
    grid_b = np.array([[0, 1], [3, 2]], dtype=np.uint8).tobytes()
    group = make_group([[(1.0, grid_a)], [(0.0, bytes(grid_a))], [(0.0, grid_b)]])
    adv = GiGPO(mode="mean_norm").advantages([group])
    # A_E: returns (1, 0, 0), mean 1/3; step group grid_a = {1, 0}: A_S = (0.5, -0.5); grid_b singleton
    assert adv.tolist() == pytest.approx([2 / 3 + 0.5, -1 / 3 - 0.5, -1 / 3], abs=1e-12)


def test_same_anchor_in_different_groups_never_mixes():
    groups = [make_group([[(1.0, "s")], [(0.0, "t")]], seed=0), make_group([[(0.0, "s")], [(0.0, "u")]], seed=1)]
    adv = GiGPO().advantages(groups)
    # each "s" is alone in its group's step groups -> A_S = 0 everywhere
    assert adv.tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0], abs=1e-12)


def test_similarity_threshold_merges_near_identical_text():
    near = ROOM.replace("drawer 1", "drawer 2")  # rapidfuzz ratio 0.990
    group = make_group([[(1.0, ROOM)], [(0.0, near)]])
    assert GiGPO().advantages([group]).tolist() == pytest.approx([0.5, -0.5])
    assert GiGPO(similarity_threshold=0.95).advantages([group]).tolist() == pytest.approx([1.0, -1.0])
    assert GiGPO(similarity_threshold=0.995).advantages([group]).tolist() == pytest.approx([0.5, -0.5])


# A real ALFWorld intro and the same room with one receptacle fewer (scripts/gigpo_similarity_check.py found it).
LONG_ROOM = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
             "you see a bathtubbasin 1, a garbagecan 1, a handtowelholder 1, a shelf 2, a shelf 1, a sinkbasin 1, "
             "a toilet 1, a toiletpaperhanger 1, and a towelholder 1.\n\nYour task is to: clean some soapbar and put "
             "it in toilet.")


def test_similarity_scores_long_observations_with_rapidfuzz_not_difflibs_junk_heuristic():
    """verl-agent scores with difflib.SequenceMatcher(None, a, b).ratio(): its automatic junk heuristic (texts of
    200+ characters) makes this one-item change score 0.38, so the two states would never share a step group at
    0.95; rapidfuzz's ratio (no heuristic) gives 0.97 and merges them (see GiGPO's docstring)."""
    import difflib

    from rapidfuzz import fuzz

    near = LONG_ROOM.replace("a bathtubbasin 1, ", "")
    assert difflib.SequenceMatcher(None, LONG_ROOM, near).ratio() < 0.4
    assert difflib.SequenceMatcher(None, LONG_ROOM, near, autojunk=False).ratio() > 0.95
    assert fuzz.ratio(LONG_ROOM, near) / 100 > 0.95
    group = make_group([[(1.0, LONG_ROOM)], [(0.0, near)]])
    assert GiGPO(similarity_threshold=0.95).advantages([group]).tolist() == pytest.approx([1.0, -1.0])


def test_similarity_is_greedy_to_the_first_representative():
    # ratios: A~B 0.8, A~C 0.9, B~C 0.9. Threshold 0.85: A and B stay apart, C joins whichever opened first.
    a, b, c = "abcdefghij", "abcdefghXY", "abcdefghiY"
    group = make_group([[(1.0, a)], [(0.0, b)], [(0.5, c)]])
    algo = GiGPO(similarity_threshold=0.85, step_weight=1.0)
    # A_E: returns (1, 0, 0.5), mean 0.5 -> (0.5, -0.5, 0); step groups {a, c} = {1, 0.5} -> (0.25, -0.25)
    assert algo.advantages([group]).tolist() == pytest.approx([0.75, -0.5, -0.25])
    swapped = make_group([[(0.0, b)], [(1.0, a)], [(0.5, c)]])
    # now b opened first: {b, c} = {0, 0.5} -> (-0.25, +0.25); a alone
    assert algo.advantages([swapped]).tolist() == pytest.approx([-0.75, 0.5, 0.25])


def test_similarity_leaves_bytes_anchors_exact():
    group = make_group([[(1.0, b"\x00" * 40)], [(0.0, b"\x00" * 39 + b"\x01")]])
    assert GiGPO(similarity_threshold=0.5).advantages([group]).tolist() == pytest.approx([0.5, -0.5])


def test_none_anchor_is_rejected_unless_steps_are_off():
    group = make_group([[(1.0, None)], [(0.0, None)]])
    with pytest.raises(AgentforgeError, match="anchor None"):
        GiGPO().advantages([group])
    assert GiGPO(step_weight=0).advantages([group]).tolist() == pytest.approx([0.5, -0.5])


def test_bad_options_name_the_problem():
    with pytest.raises(ConfigError, match="mode='mean' is not one of mean_norm, mean_std_norm"):
        GiGPO(mode="mean")
    with pytest.raises(ConfigError, match="episode_stats='step' is not one of trajectory, turn"):
        GiGPO(episode_stats="step")
    with pytest.raises(ConfigError, match=r"gamma=1.5 must be a finite number in \[0.0, 1.0\]"):
        GiGPO(gamma=1.5)
    with pytest.raises(ConfigError, match="similarity_threshold=0 must be"):
        GiGPO(similarity_threshold=0)
    with pytest.raises(ConfigError, match="unknown option.*'omega'"):
        GiGPO(omega=1.0)


def reference_gigpo(groups, gamma, mode, episode_stats, step_weight):
    """Plain loops over the definition, for cross-checking the vectorised version."""

    def normalise(x, samples):
        if len(samples) <= 1 or len(set(samples)) == 1:
            return 0.0
        centred = x - statistics.fmean(samples)
        return centred / (statistics.stdev(samples) + EPS) if mode == "mean_std_norm" else centred

    out = []
    for group in groups:
        returns = [sum(t.reward for t in tr.turns) for tr in group.trajectories]
        if episode_stats == "trajectory":
            episode_samples = returns
        else:
            episode_samples = [r for r, tr in zip(returns, group.trajectories, strict=True) for _ in tr.turns]
        discounted, by_anchor = [], {}
        for tr in group.trajectories:
            g, gs = 0.0, []
            for turn in reversed(tr.turns):
                g = turn.reward + gamma * g
                gs.append(g)
            gs.reverse()
            discounted.append(gs)
            for turn, g in zip(tr.turns, gs, strict=True):
                by_anchor.setdefault(turn.anchor, []).append(g)
        for r, tr, gs in zip(returns, group.trajectories, discounted, strict=True):
            for turn, g in zip(tr.turns, gs, strict=True):
                out.append(normalise(r, episode_samples) + step_weight * normalise(g, by_anchor[turn.anchor]))
    return out


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("episode_stats", ["trajectory", "turn"])
def test_vectorised_matches_reference_on_random_groups(mode, episode_stats):
    rng = random.Random(f"{mode}-{episode_stats}")
    groups = []
    for seed in range(40):
        trajectories = [
            [(rng.choice([0.0, -0.1, 0.5, 1.0, 10.0]), f"s{rng.randrange(4)}") for _ in range(rng.randrange(0, 8))]
            for _ in range(rng.randrange(1, 7))
        ]
        groups.append(make_group(trajectories, seed=seed))
    algo = GiGPO(mode=mode, episode_stats=episode_stats, gamma=0.9, step_weight=0.7)
    expected = reference_gigpo(groups, 0.9, mode, episode_stats, 0.7)
    assert algo.advantages(groups).tolist() == pytest.approx(expected, abs=1e-9)
