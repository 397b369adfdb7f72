"""ALFWorld's expert for SFT warm starts: the planner walkthrough stored with the game, checked against the env.

Bundled games carry the walkthrough the package's planner expert found (and that won when replayed) at generation
time. Real-format folder games carry theirs in `game.tw-pddl` when `alfworld-generate` wrote one; otherwise the
planner expert is run on the game file now. Two rules keep the SFT targets to what the agent could do:

* steps the env hides from the admissible list (`help`, see `env.HIDDEN_COMMANDS`) are dropped: the agent is never
  offered them, and they change nothing in the game;
* a stored walkthrough longer than the env's step limit (`max_steps`) could never win there: the planner's plan is
  used instead (None when that does not fit either).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from agentforge.envs.alfworld.env import HIDDEN_COMMANDS
from agentforge.envs.alfworld.gamefile import GameFileError, engine_errors
from agentforge.envs.alfworld.games import GameRecord, game_set
from agentforge.types import Task


def playable(actions: list[str]) -> list[str]:
    """The walkthrough without the steps the env never offers the agent."""
    return [a for a in actions if " ".join(a.strip().split()) not in HIDDEN_COMMANDS]


def stored_walkthrough(game: GameRecord) -> list[str] | None:
    """The walkthrough saved with the game (bundle row or `game.tw-pddl`), hidden steps dropped; None if none."""
    if game.walkthrough:
        return playable(list(game.walkthrough))
    if game.path is None:
        return None
    stored = game.game_data().get("walkthrough")
    return playable(list(stored)) if stored else None


def planner_walkthrough(game: GameRecord, max_steps: int) -> list[str] | None:
    """The package's planner expert's plan for the game now (kept only if replaying it wins). The planner reads
    `traj_data.json` beside the game file, so a bundled game is written to a temporary folder first."""
    from agentforge.envs.alfworld.generator import plan_and_check

    with engine_errors(game.path or f"{game.game_id} (bundled)"):
        if game.path is not None:
            plan, _ = plan_and_check(game.path, max_steps)
        else:
            with tempfile.TemporaryDirectory(prefix="agentforge-alfworld-") as folder:
                game_file = Path(folder) / "game.tw-pddl"
                (Path(folder) / "traj_data.json").write_text(json.dumps(
                    {"task_type": game.task_type, "pddl_params": game.pddl_params}))
                game_file.write_text(json.dumps(game.game_data()))
                plan, _ = plan_and_check(str(game_file), max_steps)
    return playable(plan) if plan else None


def walkthrough(game: GameRecord, max_steps: int = 50) -> list[str] | None:
    """The expert's actions for a game within `max_steps`: the stored walkthrough, else the planner's plan."""
    stored = stored_walkthrough(game)
    if stored and len(stored) <= max_steps:
        return stored
    plan = planner_walkthrough(game, max_steps)
    return plan if plan and len(plan) <= max_steps else None


def expert_actions(task: Task, env_options: dict[str, Any] | None = None) -> list[str] | None:
    """The expert's actions for a task's game; None when there are none within the step limit, or when the game is
    broken and `skip_broken_games` is set (the env plays another game for that task, so these would not fit)."""
    options = env_options or {}
    games = game_set(options)
    try:
        return walkthrough(games.game_for(task), int(options.get("max_steps", 50)))
    except GameFileError:
        if games.skip_broken_games:
            return None
        raise
