"""ScienceWorld on the real `scienceworld` package (its bundled Scala simulator in a JVM).

Importing this package registers `scienceworld` in `ENVS` without importing `scienceworld` itself (an optional
extra): the package and Java are needed only when an env starts its simulator.
"""

from __future__ import annotations

from agentforge.envs.scienceworld.env import ScienceWorldEnv
from agentforge.envs.scienceworld.expert import close_expert_envs, expert_actions
from agentforge.envs.scienceworld.tasks import PACKAGE_SPLIT, all_task_names, pick_task

__all__ = ["PACKAGE_SPLIT", "ScienceWorldEnv", "all_task_names", "close_expert_envs", "expert_actions", "pick_task"]
