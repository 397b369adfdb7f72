"""Adapters for environment libraries (Gymnasium, GEM, TextArena, reasoning-gym, verifiers): one module each.

Importing this package registers them all in `ENVS`; a library is imported only when one of its envs is built,
so a missing library is reported then, with the extra that installs it (docs/environments.md).
"""

from __future__ import annotations

from agentforge.envs.adapters.gem import GemEnv
from agentforge.envs.adapters.gym import GymEnv
from agentforge.envs.adapters.reasoning_gym import ReasoningGymEnv
from agentforge.envs.adapters.textarena import TextArenaEnv
from agentforge.envs.adapters.verifiers import VerifiersEnv

__all__ = ["GemEnv", "GymEnv", "ReasoningGymEnv", "TextArenaEnv", "VerifiersEnv"]
