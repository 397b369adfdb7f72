"""ALFWorld as an agentforge env: the real text engine playing bundled, real or folder games.

Observations are the game's own text (the first one is the intro with the room and "Your task is to: ...");
admissible actions are the engine's admissible commands without `help` (as verl-agent and the papers use them);
reward is 1 when the game is won, else 0; the episode ends on a win or after `max_steps` steps (50, the papers'
limit). The anchor (GiGPO's state key) is the raw observation text. `info` carries what analysis and TJPO's
descriptors need: the task type, the action type of each step, the receptacle reached by a `go to` and the
locations reached so far; `executable` is False when the engine answers "Nothing happens." (a command it cannot
carry out: not admissible here, e.g. `go to` the current location). Episodes are deterministic: the same game and
actions give the same texts.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from agentforge.envs.alfworld.gamefile import (
    GAME_KEYS,
    SKIP_OPTION,
    GameFileError,
    engine_errors,
    preload_translator,
)
from agentforge.envs.alfworld.games import GameRecord, GameSet, game_set, parse_task_types
from agentforge.envs.alfworld.task_types import short_name
from agentforge.envs.base import ENVS, EXECUTABLE
from agentforge.errors import ConfigError
from agentforge.types import Observation, StepResult, Task

# Action verbs as TJPO's ALFWorld action-type descriptor counts them (the 0.4 grammar says `move X to Y` where
# older ALFWorld said `put X in/on Y`: both count as `put`).
ACTION_TYPES: tuple[str, ...] = ("go to", "open", "close", "take", "put", "clean", "heat", "cool", "use", "examine",
                                 "look", "inventory", "other")
_VERBS: tuple[tuple[str, str], ...] = (
    ("go to ", "go to"), ("open ", "open"), ("close ", "close"), ("take ", "take"), ("move ", "put"),
    ("put ", "put"), ("clean ", "clean"), ("heat ", "heat"), ("cool ", "cool"), ("use ", "use"),
    ("examine ", "examine"),
)
HIDDEN_COMMANDS = frozenset({"help"})
log = logging.getLogger("agentforge.envs.alfworld")
NOTHING_HAPPENS = "Nothing happens."  # the engine's answer to a command it cannot carry out (state unchanged)


def action_type(action: str) -> str:
    """The verb class of a command: `go to countertop 1` -> `go to`, `move apple 1 to ...` -> `put`."""
    text = " ".join(action.strip().lower().split())
    if text in ("look", "inventory"):
        return text
    for prefix, kind in _VERBS:
        if text.startswith(prefix):
            return kind
    return "other"


def location_category(receptacle: str) -> str:
    """`countertop 2` -> `countertop` (TJPO's location descriptor counts categories)."""
    head, _, tail = receptacle.rpartition(" ")
    return head if head and tail.isdigit() else receptacle


@dataclass
class _Episode:
    game: GameRecord
    steps: int = 0
    done: bool = False
    location: str | None = None
    visited: list[str] = field(default_factory=list)


@ENVS.register("alfworld")
class AlfWorldEnv:
    """Solve a household task in a text world. Deterministic given the game (task seed) and the actions."""

    # the SFT warm start's expert (`envs.base.expert_for`): a path, so this module does not import it
    expert: ClassVar[str] = "agentforge.envs.alfworld.expert:expert_actions"
    drawing: ClassVar[str] = "agentforge.viewer.alfworld:DRAWING"  # `agentforge view` (viewer/drawings.py)
    # TJPO's descriptors and the eval's cross-metrics (agentforge/algorithms/descriptors.py finds them here)
    descriptors: ClassVar[dict[str, str]] = {"action_type": "agentforge.envs.alfworld.descriptors:alfworld_action_type",
                                             "location": "agentforge.envs.alfworld.descriptors:alfworld_location"}

    option_help: ClassVar[dict[str, str]] = {
        'data_source': 'bundled (generated games shipped with agentforge) | a folder of games | $ALFWORLD_DATA layout',
        'max_steps': "env steps before the episode ends unpaid (the papers' limit)",
        'task_types': 'Pick, Look, Clean, Heat, Cool, Pick2 (numbers, names or short names); null: all',
        'eval_split': 'ALFWorld split the agentforge `eval` split plays (in-distribution)',
        'test_split': 'ALFWorld split the agentforge `test` split plays (held-out scenes)',
        'skip_broken_games': 'true: skip (with a warning) a truncated or broken game file; false: stop naming it',
    }

    def __init__(
        self,
        data_source: str = "bundled",
        max_steps: int = 50,
        task_types: list[int | str] | None = None,
        eval_split: str = "valid_seen",
        test_split: str = "valid_unseen",
        skip_broken_games: bool = False,
    ) -> None:
        if max_steps < 1:
            raise ConfigError(f"alfworld max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps
        self.games = GameSet(str(data_source), parse_task_types(task_types), eval_split, test_split,
                             bool(skip_broken_games))
        self._broken: set[str] = set()  # game ids that failed to load (skipped when skip_broken_games)
        self._keys: dict[tuple[str, str, str | None], str] = {}  # (split, game id, path) -> task key
        self._engine: Any = None
        self._loaded: str | None = None
        self._state: Any = None
        self._episode: _Episode | None = None

    # -- episode -------------------------------------------------------------------------------------------------
    @classmethod
    def check_options(cls, options: dict[str, Any], splits: Sequence[str]) -> None:
        """Fail fast, in the driver and before any model or worker starts: the engine is installed, the options
        are valid, and every split the command plays has games (folder data: files scanned, broken ones named)."""
        for module in ("textworld", "alfworld", "fast_downward"):
            if importlib.util.find_spec(module) is None:
                from agentforge.envs.alfworld.engine import INSTALL_HINT

                raise ConfigError(f"the ALFWorld env needs {module}, which is not installed; {INSTALL_HINT}")
        if int(options.get("max_steps", 50)) < 1:
            raise ConfigError(f"alfworld max_steps must be >= 1, got {options['max_steps']}")
        games = game_set(options)
        for split in splits:
            games.games(split)
        preload_translator()  # should a Fast Downward error ever reach this process, unpickling it parses no argv

    def reset(self, task: Task) -> Observation:
        """Start the task's game; with skip_broken_games a game that fails to load is skipped (with a warning) for
        the next one of the split, the same choice in every process since loading fails the same way everywhere."""
        while True:
            game = self.games.game_for(task, self._broken)
            try:
                return self.reset_to_game(game)
            except GameFileError as err:
                if not self.games.skip_broken_games:
                    raise
                self._broken.add(game.game_id)
                message = f"skipping an ALFWorld game that does not load ({SKIP_OPTION}): {err}"
                log.warning(message)
                warnings.warn(message, stacklevel=2)

    def task_key(self, task: Task) -> str:
        """The task's content (agentforge/envs/task_keys.py): a hash of the game the task plays (its PDDL problem,
        domain and grammar with the task sentence: what the engine builds the text world from), not its path or id,
        so the same game copied into two folders or splits is one task. A game whose file does not read is skipped
        as `reset` skips it (with skip_broken_games); one that reads but fails in the engine is keyed as itself."""
        while True:
            game = self.games.game_for(task, self._broken)
            try:
                return self.game_key(game)
            except GameFileError:
                if not self.games.skip_broken_games:
                    raise
                self._broken.add(game.game_id)

    def game_key(self, game: GameRecord) -> str:
        """A game's task key (hashed once per game: seeds cycle over a split's games)."""
        where = (game.split, game.game_id, game.path)  # ids name a game within one split of one source
        if where not in self._keys:
            self._keys[where] = f"alfworld:{short_name(game.task_type)}:{game_digest(game.game_data())}"
        return self._keys[where]

    def reset_to_game(self, game: GameRecord | str | Path) -> Observation:
        """Start an episode on a given game: a record, or a `game.tw-pddl` file / game folder in the real format.
        A game the engine cannot load raises `GameFileError` naming its file."""
        if not isinstance(game, GameRecord):
            game = folder_game(Path(game))
        engine = self._get_engine()
        label = game.path or f"{game.game_id} (bundled)"
        with engine_errors(label):
            if self._loaded != game.game_id:
                self._loaded = None
                engine.load(game.game_data())
                self._loaded = game.game_id
            self._state = engine.reset()
        self._episode = _Episode(game)
        return self._observation(self._state.feedback)

    def step(self, action: str) -> StepResult:
        episode = self.episode
        if episode.done:
            raise RuntimeError("this ALFWorld episode is over (done=True); call reset() before stepping again")
        command = " ".join(str(action).strip().split())
        admissible = command in self._state["admissible_commands"]
        self._state, _, _ = self._engine.step(command)
        episode.steps += 1
        won = bool(self._state["won"])
        kind = action_type(command)
        reached = command[len("go to "):] if kind == "go to" and admissible else None
        if reached is not None:
            episode.location = reached
            if reached not in episode.visited:
                episode.visited.append(reached)
        truncated = not won and episode.steps >= self.max_steps
        episode.done = won or truncated
        info: dict[str, Any] = {
            "task_type": short_name(episode.game.task_type),
            "task_type_name": episode.game.task_type,
            "game_id": episode.game.game_id,
            "action_type": kind,
            "action_admissible": admissible,
            EXECUTABLE: self._state.feedback.strip() != NOTHING_HAPPENS,
            "location": reached,
            "location_category": location_category(reached) if reached else None,
            "current_location": episode.location,
            "visited_locations": list(episode.visited),
            "steps": episode.steps,
            "won": won,
            "truncated": truncated,
        }
        return StepResult(self._observation(self._state.feedback), 1.0 if won else 0.0, episode.done, won, info)

    def close(self) -> None:
        if self._engine is not None:
            from agentforge.envs.alfworld.engine import release_engine

            release_engine(self._engine)
        self._engine = None
        self._loaded = None
        self._episode = None

    # -- accessors -----------------------------------------------------------------------------------------------
    @property
    def episode(self) -> _Episode:
        if self._episode is None:
            raise RuntimeError("the ALFWorld env has no episode; call reset(task) first")
        return self._episode

    @property
    def game(self) -> GameRecord:
        return self.episode.game

    @property
    def admissible_commands(self) -> list[str]:
        """The engine's full admissible list (with `help`)."""
        self.episode  # noqa: B018  (raises without an episode)
        return list(self._state["admissible_commands"])

    def _get_engine(self) -> Any:
        if self._engine is None:
            from agentforge.envs.alfworld.engine import make_engine

            self._engine = make_engine()
        return self._engine

    def _observation(self, text: str) -> Observation:
        admissible = [c for c in self._state["admissible_commands"] if c not in HIDDEN_COMMANDS]
        return Observation(text=text, anchor=text, admissible=admissible)


def game_digest(game_data: dict[str, Any]) -> str:
    """A content hash of a `game.tw-pddl`'s parts that make the world the agent plays (not its walkthrough)."""
    parts = [str(game_data.get(key, "")) for key in GAME_KEYS]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def folder_game(path: Path) -> GameRecord:
    """A single real-format game (its folder or its `game.tw-pddl`) as a record."""
    from agentforge.envs.alfworld.gamefile import FIX
    from agentforge.envs.data_errors import expect, read_json, record_errors

    game_file = path / "game.tw-pddl" if path.is_dir() else path
    traj_file = game_file.parent / "traj_data.json"
    if not game_file.exists() or not traj_file.exists():
        raise ConfigError(f"{path} is not an ALFWorld game: it needs game.tw-pddl and traj_data.json side by side")
    traj = expect(read_json(traj_file, FIX), dict, traj_file, "the top level", FIX)
    with record_errors(traj_file, "the trajectory", FIX):
        return GameRecord(game_id=str(game_file.parent), split="", task_type=str(traj["task_type"]),
                          pddl_params=dict(traj.get("pddl_params") or {}), path=str(game_file))
