"""The critic-free estimators the anchors also ship (verl's registry: `rloo`, `reinforce_plus_plus`,
`reinforce_plus_plus_baseline`), each one estimator name and a config (`objective.estimators`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from agentforge.algorithms.base import ALGORITHMS, Algorithm, check_number


@dataclass
class NoOptions:
    option_help: ClassVar[dict[str, str]] = {}


@dataclass
class DiscountOptions:
    option_help: ClassVar[dict[str, str]] = {"gamma": "discount per env turn of the return-to-go (1: none)"}

    gamma: float = 1.0


@ALGORITHMS.register("rloo")
class RLOO(Algorithm):
    """A(τ_i) = R_i − the mean return of the group's other rollouts, every turn of τ_i (REINFORCE leave-one-out)."""

    name = "rloo"
    estimator = "rloo"
    group_relative = True
    config_class = NoOptions


@ALGORITHMS.register("reinforce_plus_plus")
class ReinforcePlusPlus(Algorithm):
    """Each turn's discounted return-to-go, whitened over the batch's trained tokens; no group needed."""

    name = "reinforce_plus_plus"
    estimator = "reinforce_plus_plus"
    config_class = DiscountOptions
    config: DiscountOptions

    def validate(self) -> None:
        check_number(self.name, "gamma", self.config.gamma, low=0.0, high=1.0)


@ALGORITHMS.register("reinforce_plus_plus_baseline")
class ReinforcePlusPlusBaseline(Algorithm):
    """R_i − the group's mean return, whitened over the batch's trained tokens."""

    name = "reinforce_plus_plus_baseline"
    estimator = "reinforce_plus_plus_baseline"
    group_relative = True
    config_class = NoOptions
