"""Algorithm plugins: the registry, the base class and the built-in group-relative advantage estimators.

A new algorithm is one module with an `Algorithm` subclass registered under a name, or any class reachable as
`pkg.mod:Class` from the config (`algorithm.name`), without touching this package.
"""

from __future__ import annotations

from agentforge.algorithms.base import ALGORITHMS, Algorithm, make_algorithm
from agentforge.algorithms.baselines import RLOO, ReinforcePlusPlus, ReinforcePlusPlusBaseline
from agentforge.algorithms.gigpo import GiGPO
from agentforge.algorithms.grpo import GRPO
from agentforge.algorithms.opd import OPD
from agentforge.algorithms.ppo import PPO
from agentforge.algorithms.strata import StraTA
from agentforge.algorithms.t2po import T2PO
from agentforge.algorithms.tjpo import TJPO
from agentforge.algorithms.trajevolve import TrajEvolve
from agentforge.objective.turns import TurnBatch, discounted_returns, group_relative, iter_turns

__all__ = [
    "ALGORITHMS",
    "GRPO",
    "OPD",
    "Algorithm",
    "PPO",
    "RLOO",
    "ReinforcePlusPlus",
    "ReinforcePlusPlusBaseline",
    "GiGPO",
    "StraTA",
    "T2PO",
    "TJPO",
    "TrajEvolve",
    "TurnBatch",
    "discounted_returns",
    "group_relative",
    "iter_turns",
    "make_algorithm",
]
