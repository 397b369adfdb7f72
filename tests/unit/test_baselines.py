"""RLOO, REINFORCE++ and REINFORCE++ with a baseline (objective/estimators.py, algorithms/baselines.py): hand-worked
numbers, and the token-level computation verl's functions make (each turn's value on every trained token, then
`masked_whiten` over the batch's tokens: weighted mean, unbiased variance) on a random batch."""

from __future__ import annotations

import numpy as np
import pytest

from agentforge.algorithms import make_algorithm
from agentforge.commands.overrides import override_problems
from agentforge.objective.turns import discounted_returns
from agentforge.types import Group, Task, Trajectory, Turn

pytestmark = pytest.mark.unit


def turn(reward: float, sampled: int = 3, forced: int = 0) -> Turn:
    n = sampled + forced
    return Turn(prompt_ids=[1], response_ids=list(range(10, 10 + n)), logprobs=[-1.0] * n,
                forced_mask=[i < forced for i in range(n)], response_text="", action="a", valid=True, reward=reward,
                env_reward=reward, anchor="s", observation="o")


def group(seed: int, episodes: list[list[Turn]]) -> Group:
    task = Task(env="sokoban", seed=seed)
    return Group(task=task, trajectories=[Trajectory(task=task, rollout_index=i, turns=t)
                                          for i, t in enumerate(episodes)])


def masked_whiten(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """verl's formula, token by token: (x − mean) / sqrt(var + 1e-8), mean and unbiased var over the mask."""
    x, m = values[mask], mask.sum()
    mean = x.mean()
    var = ((x - mean) ** 2).sum() / m * m / (m - 1)
    return (values - mean) / np.sqrt(var + 1e-8)


def test_rloo_baselines_each_rollout_with_the_mean_of_the_others():
    adv = make_algorithm("rloo").advantages([group(0, [[turn(1.0)], [turn(0.0), turn(0.0)], [turn(0.5)]]),
                                             group(1, [[turn(1.0)]])])
    np.testing.assert_allclose(adv, [1.0 - 0.25, -0.75, -0.75, 0.5 - 0.5, 0.0])  # a lone rollout: no baseline, 0


def random_batch(rng: np.random.Generator) -> list[Group]:
    return [group(g, [[turn(float(rng.choice([0.0, 0.0, 1.0])) - 0.1 * rng.integers(0, 2), int(rng.integers(1, 7)),
                            int(rng.integers(0, 3))) for _ in range(int(rng.integers(1, 4)))]
                      for _ in range(int(rng.integers(1, 5)))]) for g in range(5)]


def token_level(groups: list[Group], per_turn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each turn's value on each of its response tokens, and the mask of the trained (sampled) ones."""
    turns = [t for g in groups for tr in g.trajectories for t in tr.turns]
    values = np.concatenate([np.full(len(t.response_ids), v) for t, v in zip(turns, per_turn, strict=True)])
    mask = np.concatenate([~np.asarray(t.forced_mask, bool) for t in turns])
    return values, mask


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_plus_plus_is_verls_token_level_whitening_of_the_return_to_go(gamma):
    groups = random_batch(np.random.default_rng(1))
    adv = make_algorithm({"name": "reinforce_plus_plus", "gamma": gamma}).advantages(groups)
    rewards = np.array([t.reward for g in groups for tr in g.trajectories for t in tr.turns])
    lengths = np.array([tr.length for g in groups for tr in g.trajectories])
    values, mask = token_level(groups, discounted_returns(rewards, lengths, gamma))
    expected = masked_whiten(values, mask)
    got, _ = token_level(groups, adv)
    np.testing.assert_allclose(got[mask], expected[mask], rtol=1e-9, atol=1e-9)


def test_reinforce_plus_plus_baseline_centres_on_the_group_then_whitens_over_tokens():
    groups = random_batch(np.random.default_rng(2))
    adv = make_algorithm("reinforce_plus_plus_baseline").advantages(groups)
    centred = []
    for g in groups:
        returns = [tr.episode_return for tr in g.trajectories]
        mean = np.mean(returns) if len(returns) > 1 else 0.0  # verl: a group of one keeps its score
        centred += [r - mean for tr, r in zip(g.trajectories, returns, strict=True) for _ in tr.turns]
    values, mask = token_level(groups, np.array(centred))
    got, _ = token_level(groups, adv)
    np.testing.assert_allclose(got[mask], masked_whiten(values, mask)[mask], rtol=1e-9, atol=1e-9)


def test_the_group_free_estimator_trains_lone_rollouts_and_the_group_ones_refuse_them():
    assert override_problems(["command=train", "recipe=debug", "algorithm=reinforce_plus_plus",
                              "trainer.group_size=1"])[0] == []
    for name in ("rloo", "reinforce_plus_plus_baseline"):
        problems, _ = override_problems(["command=train", "recipe=debug", f"algorithm={name}", "trainer.group_size=1"])
        assert any("group_size >= 2" in p for p in problems), problems
