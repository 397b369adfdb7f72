"""GRPO: one group-relative advantage per trajectory, broadcast to all of its turns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from agentforge.algorithms.base import ALGORITHMS, Algorithm, check_bool, check_number


@dataclass
class GRPOConfig:
    """`norm_by_std: false` is Dr.GRPO (no division by the group's std)."""

    option_help: ClassVar[dict[str, str]] = {
        'norm_by_std': "divide by the group's std; false: Dr. GRPO (R - mean)",
        'epsilon': 'std floor in the normalisation',
    }


    norm_by_std: bool = True
    epsilon: float = 1e-6


@ALGORITHMS.register("grpo")
class GRPO(Algorithm):
    """A(τ_i) = (R_i − mean_g R) / (std_g R + ε) over the G trajectories of group g; every turn of τ_i gets A(τ_i).

    R_i is the trajectory's return (sum of `Turn.reward`, so invalid-action penalties count). std is the unbiased
    sample std (n − 1), as in verl/verl-agent. A group of size 1 gets A = 0 (verl-agent gives it R_i instead: a
    lone rollout has no baseline, so this project gives it no signal); a group whose returns are all equal gets
    exactly 0. Trajectories without turns count as group members with return 0 but produce no turn samples.
    """

    name = "grpo"
    estimator = "grpo"
    group_relative = True
    config_class = GRPOConfig
    config: GRPOConfig

    def validate(self) -> None:
        check_bool(self.name, "norm_by_std", self.config.norm_by_std)
        check_number(self.name, "epsilon", self.config.epsilon, low=0.0, low_open=True)
