"""PPO with a critic: per-token advantages by GAE over each episode's sampled tokens (`algorithms.gae`).

The critic role (`learner.critic`, turned on by `needs_values`) gives V_t for every sampled token; the advantages
and the critic's targets come from `episode_gae`, and the policy and the critic then step on the same
mini-batches. No group is needed: `trainer.group_size: 1` is allowed (verl's `adv_estimator: gae`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from agentforge.algorithms.advantage_utils import iter_turns
from agentforge.algorithms.base import ALGORITHMS, Algorithm, check_bool, check_number
from agentforge.algorithms.gae import TurnTokens, episode_gae, whiten
from agentforge.errors import AgentforgeError
from agentforge.types import Group, Span, Turn


@dataclass
class PPOConfig:
    option_help: ClassVar[dict[str, str]] = {
        "gamma": "discount per env turn (1: none; verl's default)",
        "lam": "GAE lambda per sampled token (1: Monte-Carlo return minus V; verl's default)",
        "normalize": "whiten the batch's token advantages (mean 0, std 1; verl does)",
    }

    gamma: float = 1.0
    lam: float = 1.0
    normalize: bool = True


@ALGORITHMS.register("ppo")
class PPO(Algorithm):
    """A_t = GAE(γ, λ) over the episode's sampled tokens with the critic's V_t; R_t = A_t + V_t trains the critic."""

    name = "ppo"
    config_class = PPOConfig
    config: PPOConfig
    needs_values = True
    not_asynchronous = ("its advantages read the critic at update time; asynchronous PPO is not built yet (use "
                        "trainer.asynchronous.max_staleness=0)")
    not_gateway = "its advantages need the sampled turns' critic values; the gateway path is not built for it yet"

    def validate(self) -> None:
        check_number(self.name, "gamma", self.config.gamma, low=0.0, high=1.0)
        check_number(self.name, "lam", self.config.lam, low=0.0, high=1.0)
        check_bool(self.name, "normalize", self.config.normalize)

    def token_advantages(self, samples: Sequence, owners: Sequence[Turn | Span], groups: Sequence[Group],
                         values: Sequence[np.ndarray]) -> np.ndarray:
        """Set each sample's token advantages, returns and old values; the per-turn mean advantage comes back flat
        in `iter_turns` order (for the trajectory records)."""
        by_owner = {id(o): i for i, o in enumerate(owners)}
        if any(isinstance(o, Span) for o in owners):
            raise AgentforgeError("ppo trains env turns only; a workflow that adds trained spans needs its own "
                                  "advantage for them")
        gamma, lam = float(self.config.gamma), float(self.config.lam)
        per_sample_adv: list[np.ndarray | None] = [None] * len(samples)
        per_sample_ret: list[np.ndarray | None] = [None] * len(samples)
        for group in groups:
            for trajectory in group.trajectories:
                chain: list[tuple[int, np.ndarray]] = []  # (sample index, its loss positions in the response)
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
                    mask = s.loss_mask[s.prompt_len:]
                    chain.append((i, mask))
                    tokens.append(TurnTokens(values=np.asarray(values[i])[mask], reward=float(turn.reward)))
                advantages, returns = episode_gae(tokens, gamma, lam, trailing if tokens else 0.0)
                for (i, mask), adv, ret in zip(chain, advantages, returns, strict=True):
                    per_sample_adv[i] = _on_response(mask, adv)
                    per_sample_ret[i] = _on_response(mask, ret)
        missing = [i for i, a in enumerate(per_sample_adv) if a is None]
        if missing:
            raise AgentforgeError(f"{len(missing)} sample(s) belong to no episode of the batch; ppo needs every "
                                  "trained turn inside its trajectory")
        advantages_list = [a for a in per_sample_adv if a is not None]
        if self.config.normalize:
            masks = [s.loss_mask[s.prompt_len:] for s in samples]
            flat = whiten([a[m] for a, m in zip(advantages_list, masks, strict=True)])
            advantages_list = [_on_response(m, a) for m, a in zip(masks, flat, strict=True)]
        per_turn = np.zeros(len(samples))
        for i, s in enumerate(samples):
            p = s.prompt_len
            s.token_advantages = np.concatenate([np.zeros(p, np.float32), advantages_list[i]])
            s.returns = np.concatenate([np.zeros(p, np.float32), per_sample_ret[i]])
            s.old_values = np.concatenate([np.zeros(p, np.float32), np.asarray(values[i], np.float32)])
            m = s.loss_mask[p:]
            per_turn[i] = float(advantages_list[i][m].mean()) if m.any() else 0.0
            s.advantage = per_turn[i]
        turn_order = [per_turn[by_owner[id(t)]] if id(t) in by_owner else 0.0 for t in iter_turns(groups)]
        flat_adv = np.concatenate([a[s.loss_mask[s.prompt_len:]] for a, s in zip(advantages_list, samples,
                                                                                  strict=True)]) \
            if samples else np.zeros(0)
        self.last_metrics = {"adv_mean": float(flat_adv.mean()) if flat_adv.size else 0.0,
                             "adv_abs_mean": float(np.abs(flat_adv).mean()) if flat_adv.size else 0.0}
        return np.asarray(turn_order, np.float64)

    def compute(self, batch: object) -> np.ndarray:
        raise AgentforgeError("ppo's advantages need the critic's values of the sampled tokens: the trainer calls "
                              "token_advantages(samples, owners, groups, values), not advantages(groups)")


def _on_response(mask: np.ndarray, loss_values: np.ndarray) -> np.ndarray:
    """Per-loss-token values spread onto the response (0 on forced tokens)."""
    out = np.zeros(len(mask), np.float32)
    out[mask] = loss_values
    return out
