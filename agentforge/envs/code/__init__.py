"""`env=code`: math problems solved with a Python tool that runs in the sandbox (`agentforge.sandbox`); importing
registers `code` in `ENVS`."""

from __future__ import annotations

from agentforge.envs.code.env import CodeEnv, parse_action, parse_number
from agentforge.envs.code.tasks import LEVELS, Problem, problem_for

__all__ = ["LEVELS", "CodeEnv", "Problem", "parse_action", "parse_number", "problem_for"]
