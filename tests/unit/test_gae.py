"""GAE over a multi-turn episode's sampled tokens (objective/gae.py) and PPO's token advantages (algorithms/ppo.py),
against a per-token loop written from the recursion and against values worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from agentforge.algorithms import make_algorithm
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.learner.batch import policy_samples
from agentforge.objective.gae import TurnTokens, episode_gae, whiten
from agentforge.types import Group, LossRole, Task, Trajectory, Turn


def reference_gae(values: list[list[float]], rewards: list[float], gamma: float, lam: float):
    """δ and A token by token, from the definitions (γ between turns, 1 inside one, V = 0 after the end)."""
    flat = [(k, v) for k, turn in enumerate(values) for v in turn]
    adv = [0.0] * len(flat)
    nxt_adv = 0.0
    for t in range(len(flat) - 1, -1, -1):
        k, v = flat[t]
        last_of_turn = t == len(flat) - 1 or flat[t + 1][0] != k
        r = rewards[k] if last_of_turn else 0.0
        g = gamma if last_of_turn else 1.0
        nv = flat[t + 1][1] if t + 1 < len(flat) else 0.0
        nxt_adv = r + g * nv - v + g * lam * nxt_adv
        adv[t] = nxt_adv
    return adv


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.9, 0.95), (0.5, 0.0)])
def test_episode_gae_matches_the_recursion_token_by_token(gamma, lam):
    rng = np.random.default_rng(0)
    values = [list(rng.normal(size=n)) for n in (3, 1, 4)]
    rewards = [0.0, -0.1, 1.0]
    advantages, returns = episode_gae([TurnTokens(np.asarray(v), r) for v, r in zip(values, rewards, strict=True)],
                                      gamma, lam)
    flat = np.concatenate(advantages)
    np.testing.assert_allclose(flat, reference_gae(values, rewards, gamma, lam), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.concatenate(returns), flat + np.concatenate(values), rtol=1e-5, atol=1e-6)
    assert [len(a) for a in advantages] == [3, 1, 4]


def test_with_gamma_and_lambda_one_the_advantage_is_the_return_to_go_minus_the_value():
    advantages, returns = episode_gae([TurnTokens(np.array([0.2, 0.4]), 0.5), TurnTokens(np.array([0.1]), 1.0)],
                                      1.0, 1.0)
    np.testing.assert_allclose(np.concatenate(advantages), [1.5 - 0.2, 1.5 - 0.4, 1.0 - 0.1], atol=1e-6)
    np.testing.assert_allclose(np.concatenate(returns), [1.5, 1.5, 1.0], atol=1e-6)
    # γ discounts per turn, not per token: the first turn's two tokens see the second turn's reward alike
    advantages, _ = episode_gae([TurnTokens(np.zeros(2), 0.0), TurnTokens(np.zeros(1), 1.0)], 0.5, 1.0)
    np.testing.assert_allclose(np.concatenate(advantages), [0.5, 0.5, 1.0], atol=1e-6)


def test_whiten_gives_mean_zero_and_unit_std_over_all_tokens():
    out = whiten([np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])])
    flat = np.concatenate(out)
    assert flat.mean() == pytest.approx(0.0, abs=1e-6) and flat.std() == pytest.approx(1.0, abs=1e-5)


def turn(prompt: list[int], response: list[int], reward: float, forced: list[bool] | None = None,
         role: LossRole = LossRole.ACTION) -> Turn:
    return Turn(prompt_ids=prompt, response_ids=response, logprobs=[-1.0] * len(response),
                forced_mask=forced or [False] * len(response), response_text="", action=None, valid=True,
                reward=reward, env_reward=reward, anchor=None, observation="", role=role)


def test_ppo_spreads_episode_gae_over_samples_and_skips_forced_tokens():
    episode = Trajectory(task=Task(env="x", seed=0), rollout_index=0, turns=[
        turn([1, 2], [3, 4, 5], 0.0, forced=[False, True, False]),  # the forced token is not in the chain
        turn([1, 2, 3], [6], 0.0, role=LossRole.NOT_TRAINED),  # no sample: its reward would move back
        turn([1, 2, 3, 4], [7, 8], 1.0),
    ])
    groups = [Group(task=episode.task, trajectories=[episode])]
    samples, owners = policy_samples(groups)
    assert len(samples) == 2
    values = [np.array([0.1, 9.0, 0.3], np.float32), np.array([0.2, 0.4], np.float32)]
    ppo = make_algorithm({"name": "ppo", "gamma": 1.0, "lam": 1.0, "normalize": False})
    per_turn = ppo.token_advantages(samples, owners, groups, values)
    first, second = samples
    np.testing.assert_allclose(first.token_advantages[2:], [1.0 - 0.1, 0.0, 1.0 - 0.3], atol=1e-6)
    np.testing.assert_allclose(second.token_advantages[4:], [1.0 - 0.2, 1.0 - 0.4], atol=1e-6)
    np.testing.assert_allclose(first.returns[2:], [1.0, 0.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(first.old_values[2:], values[0], atol=1e-6)
    assert not first.token_advantages[:2].any()  # nothing on the prompt
    assert len(per_turn) == 3 and per_turn[1] == 0.0  # flat over every turn, the untrained one 0
    assert per_turn[2] == pytest.approx(np.mean([0.8, 0.6]))


def test_ppo_is_refused_where_its_parts_are_missing():
    ppo = make_algorithm("ppo")
    assert ppo.needs_values and not ppo.not_asynchronous and ppo.not_gateway  # asynchronous PPO is built
    with pytest.raises(AgentforgeError, match="token_advantages"):
        ppo.advantages([])
    with pytest.raises(ConfigError, match="lam"):
        make_algorithm({"name": "ppo", "lam": 1.5})


def verl_gae(values: np.ndarray, rewards: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """verl's `compute_gae_advantage_return` on one response (mask all ones), written from its loop: the discount and
    λ on every token, value 0 after the last."""
    last, out = 0.0, np.zeros(len(values))
    for t in range(len(values) - 1, -1, -1):
        next_value = values[t + 1] if t + 1 < len(values) else 0.0
        last = rewards[t] + gamma * next_value - values[t] + gamma * lam * last
        out[t] = last
    return out


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)])
def test_the_verl_level_is_verls_token_level_gae_over_the_sampled_tokens(gamma, lam):
    rng = np.random.default_rng(7)
    sizes, rewards = [4, 1, 6, 3], [0.0, -0.1, 0.3, 1.0]
    turns = [TurnTokens(rng.normal(size=n), r) for n, r in zip(sizes, rewards, strict=True)]
    advantages, returns = episode_gae(turns, gamma, lam, level="verl")
    flat_values = np.concatenate([t.values for t in turns])
    flat_rewards = np.zeros(len(flat_values))
    np.put(flat_rewards, np.cumsum(sizes) - 1, rewards)
    expected = verl_gae(flat_values, flat_rewards, gamma, lam)
    np.testing.assert_allclose(np.concatenate(advantages), expected, atol=1e-6)
    np.testing.assert_allclose(np.concatenate(returns), expected + flat_values, atol=1e-6)


def test_the_turn_level_reads_each_turns_last_value_and_gives_its_tokens_one_advantage():
    turns = [TurnTokens(np.array([9.0, 0.2]), 0.0), TurnTokens(np.array([7.0, 7.0, 0.5]), 1.0)]
    advantages, returns = episode_gae(turns, 0.9, 0.5, level="turn")
    a2 = 1.0 + 0.9 * 0.0 - 0.5
    a1 = 0.0 + 0.9 * 0.5 - 0.2 + 0.9 * 0.5 * a2
    np.testing.assert_allclose(advantages[0], [a1, a1], atol=1e-6)
    np.testing.assert_allclose(advantages[1], [a2] * 3, atol=1e-6)
    np.testing.assert_allclose(returns[1], [a2 + 0.5] * 3, atol=1e-6)
    with pytest.raises(ConfigError, match="level"):
        make_algorithm({"name": "ppo", "level": "sentence"})


def test_token_targets_given_per_loss_token_are_spread_onto_the_response_and_the_turn_gets_their_mean():
    from agentforge.learner.batch import TurnSample

    sample = TurnSample(input_ids=np.arange(6), loss_mask=np.array([0, 0, 1, 0, 1, 1], bool),
                        old_logprobs=np.zeros(6), advantage=9.0, prompt_len=2)
    sample.set_token_targets(np.array([1.0, 2.0, 3.0]), returns=np.array([4.0, 5.0, 6.0]),
                             old_values=np.array([0.5, 0.5, 0.5, 0.5]))  # values: one per response token
    assert sample.token_advantages.tolist() == [0, 0, 1, 0, 2, 3]
    assert sample.returns.tolist() == [0, 0, 4, 0, 5, 6]
    assert sample.old_values.tolist() == [0, 0, 0.5, 0.5, 0.5, 0.5]
    assert sample.advantage == pytest.approx(2.0)
    with pytest.raises(ValueError, match="one per response token or one per loss token"):
        sample.set_token_targets(np.ones(2))


def ragen_bilevel(rewards_row, values_row, mask_row, gamma_token, lam, gamma_turn):
    """RAGEN's bi-level GAE as its paper and code state it, on one padded row (env tokens have mask 0; each turn's
    reward sits on its last response token): turn level over the reward positions, then token level inside each
    turn toward the turn's return. Written here from the formula, loop by loop."""
    ends = [i for i, r in enumerate(rewards_row) if r != 0]
    adv, ret, reward = [0.0] * len(values_row), [0.0] * len(values_row), list(rewards_row)
    running = 0.0
    for k in range(len(ends) - 1, -1, -1):
        nxt = values_row[ends[k + 1]] if k + 1 < len(ends) else 0.0
        running = reward[ends[k]] + gamma_turn * nxt - values_row[ends[k]] + gamma_turn * lam * running
        adv[ends[k]] = running
    for e in ends:
        ret[e] = reward[e] = adv[e] + values_row[e]
    valid = [i for i, m in enumerate(mask_row) if m]
    running = 0.0
    for j in range(len(valid) - 1, -1, -1):
        pos = valid[j]
        if pos in ends:
            nxt, running = 0.0, 0.0
        else:
            nxt = values_row[valid[j + 1]]
        delta = (reward[pos] if pos in ends else 0.0) + gamma_token * nxt - values_row[pos]
        running = delta + gamma_token * lam * running
        adv[pos], ret[pos] = running, running + values_row[pos]
    return adv, ret


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bilevel_gae_matches_ragens_formula(seed):
    rng = np.random.default_rng(seed)
    sizes = [int(n) for n in rng.integers(1, 6, size=4)]
    rewards = [float(r) for r in rng.uniform(0.1, 1.0, size=4) * rng.choice([-1, 1], size=4)]  # non-zero
    values = [rng.normal(size=n) for n in sizes]
    gamma, lam = 0.9, 0.95
    adv, ret = episode_gae([TurnTokens(v, r) for v, r in zip(values, rewards, strict=True)], gamma, lam,
                           level="bilevel")
    row_values, row_rewards, row_mask = [], [], []
    for v, r in zip(values, rewards, strict=True):
        row_values += [*v, 0.3, -0.7]  # two env tokens after each turn: masked out, never read
        row_rewards += [0.0] * (len(v) - 1) + [r, 0.0, 0.0]
        row_mask += [1] * len(v) + [0, 0]
    ref_adv, ref_ret = ragen_bilevel(row_rewards, row_values, row_mask, 1.0, lam, gamma)
    keep = [i for i, m in enumerate(row_mask) if m]
    np.testing.assert_allclose(np.concatenate(adv), np.array(ref_adv)[keep], atol=1e-6)
    np.testing.assert_allclose(np.concatenate(ret), np.array(ref_ret)[keep], atol=1e-6)
    turn_adv, _ = episode_gae([TurnTokens(v, r) for v, r in zip(values, rewards, strict=True)], gamma, lam,
                              level="turn")
    assert [a[-1] for a in adv] == pytest.approx([a[-1] for a in turn_adv], abs=1e-6)  # last token: the turn's A_k
