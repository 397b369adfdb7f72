"""ALFWorld's expert for SFT warm starts: the planner walkthrough stored with the game.

Bundled games carry the walkthrough the package's planner expert found (and that won when replayed) at generation
time. Real-format folder games carry theirs in `game.tw-pddl` when `alfworld-generate` wrote one; otherwise the
planner expert is run on the game file now. None when the walkthrough does not fit in the env's step limit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentforge.envs.alfworld.games import GameRecord, game_set
from agentforge.types import Task


def walkthrough(game: GameRecord) -> list[str] | None:
    if game.walkthrough:
        return list(game.walkthrough)
    if game.path is None:
        return None
    stored = json.loads(Path(game.path).read_text()).get("walkthrough")
    if stored:
        return list(stored)
    from agentforge.envs.alfworld.generator import plan_and_check

    plan, _ = plan_and_check(game.path)
    return plan


def expert_actions(task: Task, env_options: dict[str, Any] | None = None) -> list[str] | None:
    options = env_options or {}
    actions = walkthrough(game_set(options).game_for(task))
    if actions is None or len(actions) > int(options.get("max_steps", 50)):
        return None
    return actions
