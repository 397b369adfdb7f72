"""Environments: importing this package registers the built-in envs in `ENVS`.

Pools (`agentforge.envs.pool`) are not imported here so that using an env in-process never imports Ray.
"""

from __future__ import annotations

from agentforge.envs.base import ENVS, Env, make_env
from agentforge.envs.sokoban import SokobanEnv

__all__ = ["ENVS", "Env", "SokobanEnv", "make_env"]
