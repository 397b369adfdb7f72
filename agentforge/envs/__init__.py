"""Environments: importing this package registers the built-in envs in `ENVS`.

Pools (`agentforge.hosting.pool`) are not imported here so that using an env in-process never imports Ray.
"""

from __future__ import annotations

import agentforge.envs.adapters  # noqa: F401  (registers the library adapters)
from agentforge.envs.agent import AgentEnv
from agentforge.envs.alfworld import AlfWorldEnv
from agentforge.envs.base import ENVS, Env, make_env
from agentforge.envs.code import CodeEnv
from agentforge.envs.mix import MixEnv
from agentforge.envs.scienceworld import ScienceWorldEnv
from agentforge.envs.search_qa import SearchQAEnv
from agentforge.envs.sokoban import SokobanEnv
from agentforge.envs.webshop import WebShopEnv

__all__ = ["ENVS", "AgentEnv", "AlfWorldEnv", "CodeEnv", "Env", "MixEnv", "ScienceWorldEnv", "SearchQAEnv",
           "SokobanEnv", "WebShopEnv", "make_env"]
