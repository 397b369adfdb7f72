"""Generalised advantage estimation over a multi-turn episode's tokens, with a critic's values.

The episode is read as one chain of the tokens the policy sampled, turn after turn (observation and forced tokens
are not in it: verl's multi-turn GAE skips observation tokens the same way). Each turn's reward lands on its last
sampled token; between tokens of one turn nothing is discounted, between turns `gamma` is (one env step, as
GiGPO's γ), and λ mixes per token (RAGEN's bi-level GAE discounts per turn and mixes per token alike). The chain
ends with value 0 after its last token (an episode cut at `agent.max_turns` is not bootstrapped).

    δ_t = r_t + g_t · V_{t+1} − V_t,    A_t = δ_t + g_t · λ · A_{t+1},    R_t = A_t + V_t

with g_t = γ at a turn's last token and 1 inside a turn. With γ = λ = 1 (verl's defaults) A_t is the episode's
remaining return minus V_t: the critic is a per-token baseline.

`level` (PPO's `algorithm.level`) picks the chain: `token` (the above), `verl` (γ and λ on every token: verl's
`compute_gae_advantage_return` over the sampled tokens, rewards on each turn's last token) or `turn` (one step per
turn, the value read at each turn's last token, Turn-PPO's and GEM's turn-level critic: δ_k = r_k + γ·V_{k+1} − V_k,
A_k = δ_k + γλ·A_{k+1}; every token of turn k gets A_k and the target R_k = A_k + V_k) or `bilevel` (RAGEN's
bi-level GAE: the turn-level A_k and R_k = A_k + V_k as `turn` computes them, then token-level GAE inside each turn
towards R_k: at the turn's last token A = R_k − V_last (= A_k), before it δ_t = V_{t+1} − V_t and
A_t = δ_t + λ·A_{t+1}, no discount inside a turn; R_t = A_t + V_t). RAGEN's code finds turn ends where the reward is
non-zero; here every turn's last sampled token ends it (the same when each turn has a non-zero reward).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentforge.errors import AgentforgeError
from agentforge.types import Group, Span, Turn


@dataclass
class TurnTokens:
    """One sampled turn of an episode as GAE reads it: its loss tokens' values, and the turn's reward."""

    values: np.ndarray  # float, one per loss token of the turn, in order
    reward: float


LEVELS = ("token", "verl", "turn", "bilevel")


def episode_gae(turns: Sequence[TurnTokens], gamma: float, lam: float,
                trailing_reward: float = 0.0, level: str = "token") -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Advantages and returns of every loss token of one episode, per turn (aligned with `turns[k].values`).

    `trailing_reward` is reward that arrived after the last sampled token (a later turn without sampled tokens),
    already discounted to that token."""
    sizes = [len(t.values) for t in turns]
    if not sum(sizes):
        return [np.zeros(0, np.float32) for _ in turns], [np.zeros(0, np.float32) for _ in turns]
    if level == "turn":
        return _turn_gae(turns, sizes, gamma, lam, trailing_reward)
    if level == "bilevel":
        return _bilevel_gae(turns, sizes, gamma, lam, trailing_reward)
    values = np.concatenate([np.asarray(t.values, np.float64) for t in turns])
    rewards = np.zeros_like(values)
    step = np.ones_like(values)  # the discount from token t to token t+1
    end = 0
    for turn, size in zip(turns, sizes, strict=True):
        end += size
        if size:
            rewards[end - 1] += turn.reward
            step[end - 1] = gamma
    last = len(values) - 1
    rewards[last] += trailing_reward
    if level == "verl":
        step[:] = gamma
    advantages = np.zeros_like(values)
    running = 0.0
    for t in range(last, -1, -1):
        next_value = values[t + 1] if t < last else 0.0
        delta = rewards[t] + step[t] * next_value - values[t]
        running = delta + step[t] * lam * running
        advantages[t] = running
    returns = advantages + values
    cuts = np.cumsum(sizes)[:-1]
    return ([a.astype(np.float32) for a in np.split(advantages, cuts)],
            [r.astype(np.float32) for r in np.split(returns, cuts)])


def _turn_gae(turns: Sequence[TurnTokens], sizes: list[int], gamma: float, lam: float,
              trailing_reward: float) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """One step per turn with a sampled token (a turn without one is skipped, its reward already passed on)."""
    kept = [k for k, size in enumerate(sizes) if size]
    values = np.array([float(np.asarray(turns[k].values)[-1]) for k in kept])
    rewards = np.array([float(turns[k].reward) for k in kept])
    rewards[-1] += trailing_reward
    advantages = np.zeros(len(kept))
    running = 0.0
    for i in range(len(kept) - 1, -1, -1):
        next_value = values[i + 1] if i + 1 < len(kept) else 0.0
        running = rewards[i] + gamma * next_value - values[i] + gamma * lam * running
        advantages[i] = running
    by_turn = dict(zip(kept, range(len(kept)), strict=True))
    adv = [np.full(size, advantages[by_turn[k]] if size else 0.0, np.float32) for k, size in enumerate(sizes)]
    ret = [np.full(size, advantages[by_turn[k]] + values[by_turn[k]] if size else 0.0, np.float32)
           for k, size in enumerate(sizes)]
    return adv, ret


def _bilevel_gae(turns: Sequence[TurnTokens], sizes: list[int], gamma: float, lam: float,
                 trailing_reward: float) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The turn-level targets R_k, then GAE with λ over each turn's tokens toward its R_k (RAGEN's bi-level)."""
    turn_adv, turn_ret = _turn_gae(turns, sizes, gamma, lam, trailing_reward)
    adv, ret = [], []
    for turn, size, target in zip(turns, sizes, turn_ret, strict=True):
        values = np.asarray(turn.values, np.float64)
        out = np.zeros(size)
        running = 0.0
        for t in range(size - 1, -1, -1):
            delta = (float(target[-1]) if t == size - 1 else values[t + 1]) - values[t]
            running = delta + (lam * running if t < size - 1 else 0.0)
            out[t] = running
        adv.append(out.astype(np.float32))
        ret.append((out + values).astype(np.float32))
    return adv, ret


def whiten(arrays: Sequence[np.ndarray], eps: float = 1e-8) -> list[np.ndarray]:
    """Every token's advantage shifted and scaled by the batch's mean and std over all tokens (verl's
    `masked_whiten`)."""
    flat = np.concatenate([np.asarray(a, np.float64) for a in arrays]) if arrays else np.zeros(0)
    if flat.size < 2:
        return [np.asarray(a, np.float32) for a in arrays]
    mean, std = flat.mean(), flat.std()
    return [((np.asarray(a, np.float64) - mean) / (std + eps)).astype(np.float32) for a in arrays]


@dataclass
class SampleGAE:
    """Per sample (aligned with the samples given), over its loss tokens only: advantages (whitened when asked) and
    returns (never whitened: the critic's targets)."""

    advantages: list[np.ndarray]
    returns: list[np.ndarray]


def batch_gae(samples: Sequence[Any], owners: Sequence[Turn | Span], groups: Sequence[Group],
              values: Sequence[np.ndarray], gamma: float, lam: float, normalize: bool,
              level: str = "token") -> SampleGAE:
    """GAE over every episode of `groups`, one chain per trajectory through its sampled turns. `samples[i]` (with
    `loss_mask` and `prompt_len`) was made from `owners[i]`, a turn of `groups`; `values[i]` is the critic's value
    per response token. A turn without a sample (nothing trained in it) passes its reward, discounted, to the
    previous sampled token."""
    by_owner = {id(o): i for i, o in enumerate(owners)}
    if any(isinstance(o, Span) for o in owners):
        raise AgentforgeError("ppo trains env turns only; a workflow that adds trained spans needs its own "
                              "advantage for them")
    advantages: list[np.ndarray | None] = [None] * len(samples)
    returns: list[np.ndarray | None] = [None] * len(samples)
    for group in groups:
        for trajectory in group.trajectories:
            chain: list[int] = []
            tokens: list[TurnTokens] = []
            trailing, lag = 0.0, 1.0  # reward of turns without a sample, discounted to the last sampled token
            for turn in trajectory.turns:
                i = by_owner.get(id(turn))
                if i is None:
                    lag *= gamma
                    trailing += lag * float(turn.reward)
                    continue
                if tokens and trailing:
                    tokens[-1].reward += trailing
                trailing, lag = 0.0, 1.0
                s = samples[i]
                chain.append(i)
                tokens.append(TurnTokens(values=np.asarray(values[i])[s.loss_mask[s.prompt_len:]],
                                         reward=float(turn.reward)))
            episode_adv, episode_ret = episode_gae(tokens, gamma, lam, trailing if tokens else 0.0, level)
            for i, adv, ret in zip(chain, episode_adv, episode_ret, strict=True):
                advantages[i], returns[i] = adv, ret
    missing = sum(a is None for a in advantages)
    if missing:
        raise AgentforgeError(f"{missing} sample(s) belong to no episode of the batch; ppo needs every trained turn "
                              "inside its trajectory")
    done = [a for a in advantages if a is not None]
    return SampleGAE(whiten(done) if normalize else done, [r for r in returns if r is not None])
