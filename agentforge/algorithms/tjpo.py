"""TJPO: GiGPO plus an explicit trajectory-diversity credit, A_i ← A_i^GiGPO + λ·ĉ_i on every turn of τ_i.

What should be diverse is a descriptor (agentforge.algorithms.descriptors); how a group should spread out in
descriptor space is a functional (pairwise or determinantal, agentforge.algorithms.diversity). The credit is
computed per group of G rollouts of one task and z-scored within it, so it only reorders trajectories of the same
task and never shifts a group's mean advantage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agentforge.algorithms.base import ALGORITHMS, check_choice, check_number
from agentforge.algorithms.descriptors import describe_group, get_descriptor
from agentforge.algorithms.diversity import (
    ETA,
    FALLBACKS,
    FUNCTIONALS,
    SIGMA,
    group_credit_detail,
    pairwise_diversity,
)
from agentforge.algorithms.gigpo import GiGPO, GiGPOConfig
from agentforge.errors import ConfigError
from agentforge.objective.turns import TurnBatch
from agentforge.types import Group

PARTICIPANTS = ("all", "successful")


@dataclass
class TJPOConfig(GiGPOConfig):
    """GiGPO's options plus the diversity ones. `lambda` is spelled `lambda_` here (a Python keyword); the config
    and the command line use `algorithm.lambda`. `participants` is a project choice (the paper is silent): `all`
    trajectories of a group share the credit, or only the `successful` ones (the others get ĉ = 0). `sigma` is the
    determinantal kernel's width (the paper's 10; on ℓ1-normalised descriptors that leaves groups of ~7 to the
    fallback, see docs/tjpo.md), an option so that it can be swept (`--multirun algorithm.sigma=0.3,1,10`)."""

    option_help: ClassVar[dict[str, str]] = {
        **GiGPOConfig.option_help,
        'descriptor': 'alfworld: location | action_type; sokoban: direction_transition | spatial_coverage; '
                      'or pkg.module:fn',
        'functional': 'pairwise | determinantal',
        'lambda_': "diversity weight lambda (the paper's ablation: 0, 0.1, 0.3, 0.5)",
        'participants': 'all | successful: which trajectories of a group share the credit (project choice)',
        'sigma': 'determinantal RBF kernel width (paper 10; adv/dpp_fallback_rate, docs/tjpo.md)',
        'eta': 'determinantal jitter (L = K + eta I)',
    }


    descriptor: str = "location"
    functional: str = "pairwise"
    lambda_: float = 0.3
    participants: str = "all"
    sigma: float = SIGMA
    eta: float = ETA


@ALGORITHMS.register("tjpo")
class TJPO(GiGPO):
    """GiGPO advantages plus λ times the group-standardised diversity credit of each trajectory (every turn)."""

    name = "tjpo"
    config_class = TJPOConfig
    config: TJPOConfig

    def __init__(self, **options: Any) -> None:
        self._fallbacks: list[tuple[int, str | None]] = []  # per group of the last batch: (members, fallback)
        super().__init__(**options)

    def validate(self) -> None:
        super().validate()
        c = self.config
        if isinstance(c.lambda_, int | float) and not isinstance(c.lambda_, bool) and c.lambda_ < 0:
            raise ConfigError(f"algorithm 'tjpo': lambda={c.lambda_} is negative; the diversity weight must be >= 0 "
                              "(0 is plain GiGPO; the paper uses 0.3 and ablates 0, 0.1, 0.3, 0.5)")
        check_number(self.name, "lambda", c.lambda_, low=0.0)
        check_choice(self.name, "functional", c.functional, FUNCTIONALS)
        check_choice(self.name, "participants", c.participants, PARTICIPANTS)
        check_number(self.name, "sigma", c.sigma, low=0.0, low_open=True)
        check_number(self.name, "eta", c.eta, low=0.0, low_open=True)
        self.descriptor = get_descriptor(c.descriptor)

    def advantages(self, groups: Sequence[Group]) -> np.ndarray:
        batch = TurnBatch.from_groups(groups)
        base = self.compute(batch)
        credit, spread, zero_groups = self.trajectory_credits(groups)
        advantages = base + float(self.config.lambda_) * credit[batch.traj_id]
        self.last_metrics.update({
            "adv_mean": float(advantages.mean()) if advantages.size else 0.0,
            "diversity_credit_abs_mean": float(np.abs(credit).mean()) if credit.size else 0.0,
            f"div_pair/{self.descriptor.name}": float(np.nanmean(spread)) if np.isfinite(spread).any() else 0.0,
            "diversity_zero_credit_groups": zero_groups,
        })
        if self.config.functional == "determinantal":
            self.last_metrics.update(self.fallback_rates())
        return advantages

    def fallback_rates(self) -> dict[str, float]:
        """Of the last batch's groups with two or more credited trajectories: the fraction whose determinantal credit
        came from a fallback (`dpp_fallback_rate`) and from each one (`dpp_fallback_rate/<name>`). Near 1 means
        the determinant ratio never decided: lower `algorithm.sigma` (see `diversity.determinantal_credit_detail`)."""
        counted = [f for size, f in self._fallbacks if size >= 2]
        if not counted:
            return {"dpp_fallback_rate": 0.0, **{f"dpp_fallback_rate/{name}": 0.0 for name in FALLBACKS}}
        out = {"dpp_fallback_rate": sum(f is not None for f in counted) / len(counted)}
        out.update({f"dpp_fallback_rate/{name}": sum(f == name for f in counted) / len(counted) for name in FALLBACKS})
        return out

    def trajectory_credits(self, groups: Sequence[Group]) -> tuple[np.ndarray, np.ndarray, float]:
        """ĉ per trajectory (flat, in group order), each group's D^pair over all its rollouts, and the fraction of
        groups whose credit is all zero (training metrics).

        Also records each trajectory's descriptor and credit in `Trajectory.meta` so samples.jsonl shows them, and
        each group's (credited members, determinantal fallback) for `fallback_rates`.
        """
        c = self.config
        credits: list[np.ndarray] = []
        spread = np.full(len(groups), np.nan)
        self._fallbacks = []
        for g, group in enumerate(groups):
            vectors = describe_group(self.descriptor, group.trajectories)
            mask = np.array([t.won for t in group.trajectories], dtype=bool) if c.participants == "successful" else None
            credit, fallback = group_credit_detail(vectors, c.functional, mask, float(c.sigma), float(c.eta))
            self._fallbacks.append((len(vectors) if mask is None else int(mask.sum()), fallback))
            credits.append(credit)
            spread[g] = pairwise_diversity(vectors)
            for trajectory, vector, value in zip(group.trajectories, vectors, credit, strict=True):
                trajectory.meta["descriptor"] = {self.descriptor.name: vector.round(6).tolist()}
                trajectory.meta["diversity_credit"] = float(value)
        flat = np.concatenate(credits) if credits else np.zeros(0)
        zero_groups = float(np.mean([not np.any(c) for c in credits])) if credits else 0.0
        return flat, spread, zero_groups
