"""The code env's expert (SFT warm starts, tests): run the problem's own solution in the sandbox, then answer with
what it printed. It counts only when that output is the right answer, so its trajectories never answer unseen."""

from __future__ import annotations

from typing import Any

from agentforge.envs.code.env import CodeEnv
from agentforge.envs.code.tasks import problem_for
from agentforge.types import Task


def expert_actions(task: Task, env_options: dict[str, Any] | None = None) -> list[str] | None:
    env = CodeEnv(**(env_options or {}))
    try:
        env.reset(task)
        solution = problem_for(task.seed, env.level).solution
        if env.max_turns < 2:
            return None
        result = env.sandbox.run(solution)
        printed = result.stdout.strip()
        if not result.ok or printed != str(env.problem.answer):
            return None
        return [f"python[{solution}]", f"answer[{printed}]"]
    finally:
        env.close()
