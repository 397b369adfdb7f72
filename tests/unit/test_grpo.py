"""GRPO advantages, the TurnBatch build and the algorithm registry, checked against hand-worked numbers."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np
import pytest
from omegaconf import OmegaConf

from agentforge.algorithms import ALGORITHMS, GRPO, GiGPO, TurnBatch, iter_turns, make_algorithm
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.types import Group, Task, Trajectory, Turn

pytestmark = pytest.mark.unit

EPS = 1e-6


def make_turn(reward: float, anchor: Hashable = "state", valid: bool = True) -> Turn:
    """A Turn with only what advantages read set meaningfully; `reward` is already penalised."""
    return Turn(prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.5], forced_mask=[False], response_text="<action>a",
                action="a" if valid else None, valid=valid, reward=reward, env_reward=reward + (0.0 if valid else 0.1),
                anchor=anchor, observation=str(anchor))


def make_group(trajectories: Sequence[Sequence[float]], seed: int = 0) -> Group:
    """One group; each trajectory is given as its per-turn rewards."""
    task = Task(env="test", seed=seed)
    return Group(task=task, trajectories=[
        Trajectory(task=task, rollout_index=i, turns=[make_turn(r) for r in rewards])
        for i, rewards in enumerate(trajectories)
    ])


def test_group_of_three_with_returns_one_zero_zero():
    adv = GRPO().advantages([make_group([[1.0], [0.0], [0.0]])])
    # mean 1/3; unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3) = 0.5773503
    std = math.sqrt(1 / 3)
    assert adv == pytest.approx([(2 / 3) / (std + EPS), (-1 / 3) / (std + EPS), (-1 / 3) / (std + EPS)], abs=1e-12)
    assert adv == pytest.approx([1.1547, -0.57735, -0.57735], abs=1e-4)


def test_all_equal_returns_give_exact_zero():
    adv = GRPO().advantages([make_group([[0.3, 0.3], [0.1, 0.5], [0.6]])])
    assert adv.tolist() == [0.0] * 5


def test_singleton_group_gets_zero():
    adv = GRPO().advantages([make_group([[5.0, 2.0]])])
    assert adv.tolist() == [0.0, 0.0]
    assert GRPO(norm_by_std=False).advantages([make_group([[5.0]])]).tolist() == [0.0]


def test_dr_grpo_skips_std():
    adv = GRPO(norm_by_std=False).advantages([make_group([[1.0], [0.0], [0.0]])])
    assert adv == pytest.approx([2 / 3, -1 / 3, -1 / 3], abs=1e-12)


def test_every_turn_gets_its_trajectorys_value_with_penalties_in_the_return():
    # returns: 0.5 + 0.5 = 1.0; 0 + (-0.1 invalid) = -0.1; 0.0  -> mean 0.3
    adv = GRPO(norm_by_std=False).advantages([make_group([[0.5, 0.5], [0.0, -0.1], [0.0]])])
    assert adv == pytest.approx([0.7, 0.7, -0.4, -0.4, -0.3], abs=1e-12)


def test_groups_are_normalised_separately_and_flat_order_is_the_turn_loop():
    groups = [make_group([[1.0], [0.0]], seed=0), make_group([[3.0, 0.0], [0.0], [0.0]], seed=1)]
    adv = GRPO(norm_by_std=False).advantages(groups)
    assert adv == pytest.approx([0.5, -0.5, 2.0, 2.0, -1.0, -1.0], abs=1e-12)
    assert len(adv) == len(list(iter_turns(groups)))


def test_epsilon_is_configurable():
    adv = GRPO(epsilon=1.0).advantages([make_group([[1.0], [0.0]])])
    std = math.sqrt(0.5)  # returns (1, 0): unbiased std sqrt(0.5)
    assert adv == pytest.approx([0.5 / (std + 1.0), -0.5 / (std + 1.0)], abs=1e-12)


def test_empty_inputs_and_trajectories_without_turns():
    assert GRPO().advantages([]).shape == (0,)
    # the empty trajectory is a rollout with return 0: mean of (2, 0) is 1
    adv = GRPO(norm_by_std=False).advantages([make_group([[2.0], []])])
    assert adv.tolist() == [1.0]


def test_turn_batch_arrays():
    task = Task(env="test", seed=0)
    g0 = Group(task=task, trajectories=[
        Trajectory(task=task, rollout_index=0, turns=[make_turn(1.0, "a"), make_turn(0.0, "b"), make_turn(2.0, "a")]),
        Trajectory(task=task, rollout_index=1, turns=[make_turn(-0.1, "b", valid=False)]),
    ])
    g1 = Group(task=task, trajectories=[Trajectory(task=task, rollout_index=0, turns=[make_turn(0.5, "a")])])
    batch = TurnBatch.from_groups([g0, g1])
    assert batch.group_id.tolist() == [0, 0, 0, 0, 1]
    assert batch.traj_id.tolist() == [0, 0, 0, 1, 2]
    assert batch.turn_index.tolist() == [0, 1, 2, 0, 0]
    assert batch.reward.tolist() == [1.0, 0.0, 2.0, -0.1, 0.5]
    assert batch.anchor_id.tolist() == [0, 1, 0, 1, 0]
    assert batch.step_id.tolist() == [0, 1, 0, 1, 2]  # "a" of group 1 is its own step group
    assert batch.n_steps == 3
    assert batch.traj_return.tolist() == pytest.approx([3.0, 3.0, 3.0, -0.1, 0.5])
    assert batch.traj_returns.tolist() == pytest.approx([3.0, -0.1, 0.5])
    assert batch.traj_group.tolist() == [0, 0, 1]
    assert [p.tolist() for p in batch.per_trajectory(np.arange(5))] == [[0, 1, 2], [3], [4]]


def test_non_finite_reward_is_named():
    group = make_group([[0.0, float("nan")]], seed=7)
    with pytest.raises(AgentforgeError, match=r"turn 1 of rollout 0 of test\[train\] seed=7 has reward nan"):
        GRPO().advantages([group])


def test_unhashable_anchor_is_named():
    group = make_group([[0.0]])
    group.trajectories[0].turns[0].anchor = [1, 2]  # type: ignore[assignment]
    with pytest.raises(AgentforgeError, match="unhashable anchor.*tobytes"):
        GRPO().advantages([group])


def test_metrics_count_groups_without_signal():
    algo = GRPO()
    algo.advantages([make_group([[1.0], [1.0]]), make_group([[1.0], [0.0]]), make_group([[4.0]])])
    assert algo.last_metrics["groups_no_signal_fraction"] == pytest.approx(2 / 3)


def test_registry_and_make_algorithm():
    assert {"grpo", "gigpo"} <= set(ALGORITHMS.names())
    assert isinstance(make_algorithm("grpo"), GRPO)
    algo = make_algorithm({"name": "grpo", "norm_by_std": False, "epsilon": 1e-4})
    assert algo.config.norm_by_std is False and algo.config.epsilon == 1e-4
    hydra_cfg = OmegaConf.create({"name": "gigpo", "gamma": 0.9, "similarity_threshold": None})
    gigpo = make_algorithm(hydra_cfg)
    assert isinstance(gigpo, GiGPO) and gigpo.config.gamma == 0.9
    assert isinstance(make_algorithm("agentforge.algorithms.grpo:GRPO"), GRPO)


def test_bad_configs_name_the_problem():
    with pytest.raises(ConfigError, match="unknown algorithm 'nope'; valid algorithms: .*gigpo, grpo"):
        make_algorithm("nope")
    with pytest.raises(ConfigError, match="unknown option.*'norm_by_sd'.*valid options: norm_by_std, epsilon"):
        make_algorithm({"name": "grpo", "norm_by_sd": True})
    with pytest.raises(ConfigError, match="has no 'name'"):
        make_algorithm({"norm_by_std": True})
    with pytest.raises(ConfigError, match="norm_by_std='no' must be true or false"):
        GRPO(norm_by_std="no")
    with pytest.raises(ConfigError, match="epsilon=0 must be a finite number"):
        GRPO(epsilon=0)
    with pytest.raises(ConfigError, match="not an agentforge Algorithm"):
        make_algorithm("agentforge.types:Turn")


def test_a_new_group_relative_method_is_one_estimator_registration_and_a_config():
    """RLOO (leave-one-out baseline) written as a plugin: an estimator in the registry, an Algorithm naming it."""
    from dataclasses import dataclass

    from agentforge.algorithms import Algorithm
    from agentforge.objective import ADVANTAGE_ESTIMATORS, Advantages

    @ADVANTAGE_ESTIMATORS.register("test_rloo")
    def rloo(batch: TurnBatch, options: object) -> Advantages:
        sums = np.bincount(batch.traj_group, weights=batch.traj_returns, minlength=batch.n_groups)
        sizes = np.bincount(batch.traj_group, minlength=batch.n_groups)
        baseline = (sums[batch.traj_group] - batch.traj_returns) / np.maximum(sizes[batch.traj_group] - 1, 1)
        return Advantages((batch.traj_returns - baseline)[batch.traj_id], {"adv_mean": 0.0})

    @dataclass
    class RLOOConfig:
        pass

    class RLOO(Algorithm):
        name = "test_rloo"
        estimator = "test_rloo"
        config_class = RLOOConfig

    adv = RLOO().advantages([make_group([[1.0], [0.0, 0.0], [0.5]])])
    np.testing.assert_allclose(adv, [1.0 - 0.25, -0.75, -0.75, 0.5 - 0.5])
    with pytest.raises(AgentforgeError, match="advantage estimator"):
        type("Bad", (Algorithm,), {"name": "bad", "estimator": "no_such_estimator"})().advantages(
            [make_group([[1.0], [0.0]])])
