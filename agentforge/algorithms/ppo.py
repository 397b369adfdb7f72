"""PPO with a critic: per-token advantages by GAE over each episode's sampled tokens (`objective.gae`).

The critic role (`learner.critic`, turned on by `needs_values`) gives V_t for every sampled token; the advantages
and the critic's targets come from `episode_gae`, and the policy and the critic then step on the same
mini-batches. No group is needed: `trainer.group_size: 1` is allowed (verl's `adv_estimator: gae`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from agentforge.algorithms.base import ALGORITHMS, Algorithm, check_bool, check_choice, check_number
from agentforge.errors import AgentforgeError
from agentforge.objective.gae import LEVELS, batch_gae
from agentforge.objective.turns import iter_turns
from agentforge.types import Group, Span, Turn


@dataclass
class PPOConfig:
    option_help: ClassVar[dict[str, str]] = {
        "gamma": "discount per env turn (1: none; verl's default)",
        "lam": "GAE lambda per sampled token (1: Monte-Carlo return minus V; verl's default)",
        "normalize": "whiten the batch's token advantages (mean 0, std 1; verl does)",
        "level": "token (gamma per turn, lambda per token) | verl (gamma and lambda per token) | turn (a turn-level "
                 "critic: the value at each turn's last token, one advantage per turn) | bilevel (RAGEN: turn-level "
                 "targets, then token-level GAE inside each turn)",
    }

    gamma: float = 1.0
    lam: float = 1.0
    normalize: bool = True
    level: str = "token"


@ALGORITHMS.register("ppo")
class PPO(Algorithm):
    """A_t = GAE(γ, λ) over the episode's sampled tokens with the critic's V_t; R_t = A_t + V_t trains the critic."""

    name = "ppo"
    config_class = PPOConfig
    config: PPOConfig
    needs_values = True
    not_gateway = "its advantages need the sampled turns' critic values; the gateway path is not built for it yet"

    def validate(self) -> None:
        check_number(self.name, "gamma", self.config.gamma, low=0.0, high=1.0)
        check_number(self.name, "lam", self.config.lam, low=0.0, high=1.0)
        check_bool(self.name, "normalize", self.config.normalize)
        check_choice(self.name, "level", self.config.level, LEVELS)

    def token_advantages(self, samples: Sequence, owners: Sequence[Turn | Span], groups: Sequence[Group],
                         values: Sequence[np.ndarray]) -> np.ndarray:
        """Set each sample's token advantages, returns and old values; the per-turn mean advantage comes back flat
        in `iter_turns` order (for the trajectory records)."""
        gae = batch_gae(samples, owners, groups, values, float(self.config.gamma), float(self.config.lam),
                        bool(self.config.normalize), str(self.config.level))
        per_sample = np.zeros(len(samples))
        for i, s in enumerate(samples):
            s.set_token_targets(gae.advantages[i], gae.returns[i], values[i])
            per_sample[i] = s.advantage
        by_owner = {id(o): i for i, o in enumerate(owners)}
        flat = np.concatenate(gae.advantages) if samples else np.zeros(0)
        self.last_metrics = {"adv_mean": float(flat.mean()) if flat.size else 0.0,
                             "adv_abs_mean": float(np.abs(flat).mean()) if flat.size else 0.0}
        return np.asarray([per_sample[by_owner[id(t)]] if id(t) in by_owner else 0.0 for t in iter_turns(groups)],
                          np.float64)

    def compute(self, batch: object) -> np.ndarray:
        raise AgentforgeError("ppo's advantages need the critic's values of the sampled tokens: the trainer calls "
                              "token_advantages(samples, owners, groups, values), not advantages(groups)")

