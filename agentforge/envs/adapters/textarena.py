"""TextArena games as text envs (`env=textarena env.id=GuessTheNumber-v0`), single- and two-player.

TextArena's loop: `reset(num_players, seed)`, then `get_observation() -> (player, text)` and `step(text) -> (done,
info)` for whichever player moves, and `close() -> (rewards, game_info)` once done. The adapter plays that loop:
the trained policy is `player` (one side); every other side is the `opponent` (below), whose moves run inside
`step` until it is the policy's turn again. The game parses moves itself (its regexes, e.g. `[5]`); a move it
refuses is counted against its error allowance and named in `info["invalid_action"]` (executable False).

Rewards: TextArena pays only when the game ends (`close()`'s rewards): every turn before pays 0, the last pays the
policy's side's reward. Success: single-player, the game's reward reaches 1 (a solved puzzle); two-player, the
policy's reward beats every other side's (a win; a draw is not).

Opponents (two-player games): `random` (a seeded pick among the moves written in brackets in its observation, e.g.
TicTacToe's `Available Moves: '[4]', ...`; deterministic given the seed), `model` (greedy generation by an HF model:
`opponent_model` = smollm2-135m, the base model, or a checkpoint folder such as `<run>/model`; loaded once per
worker process), or `pkg.module:callable` (observation, random.Random) -> move.

Self-play (`opponent=self`): the policy plays every side. No move runs inside `step`: every turn goes back to the
agent, and each observation's info names the side to move (`player`) and how many the policy plays (`sides`); the
final step pays the mover's reward and its info holds every side's (`rewards`) and the `winners`. The rollout then
splits each game into one trajectory per side, each trained in a group of its own (`agentforge.rollout.sides`;
docs/environments.md, "Two-player games"). `player` is ignored.
"""

from __future__ import annotations

import importlib
import inspect
import json
import random
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from agentforge.envs.adapters.common import (
    INVALID,
    PrivateRng,
    bad_options,
    check_action_format,
    import_library,
    plain_data,
    plain_fields,
    plain_kwargs,
    unknown_id,
)
from agentforge.envs.base import ENVS, EXECUTABLE, REWARDS, SIDE, SIDES, WINNERS
from agentforge.errors import ConfigError
from agentforge.types import Observation, StepResult, Task

NAME = "textarena"
EXTRA = "textarena"
SELF_PLAY = "self"
BUILTIN_OPPONENTS = ("random", "model", SELF_PLAY)
_BRACKETED = re.compile(r"\[[^\[\]\n]{1,40}\]")
_MAX_OPPONENT_MOVES = 1000  # a game whose opponent never hands the turn back is a bug in it, not a long game
Opponent = Callable[[str, random.Random], str]


def _ta() -> Any:
    return import_library("textarena", EXTRA, NAME)


def forget_earlier_games(env: Any) -> None:
    """Clear the message logs of TextArena's observation wrappers (`full_observations`), which their reset keeps: an
    env reused for the next game (the env host keeps one per slot) showed every earlier game's log in its first
    observation, so a task's prompt depended on what the slot had played before and grew until it passed
    `agent.max_prompt_tokens` (809 tokens at GuessTheNumber's iteration 3, where a first prompt is 300)."""
    layer, depth = env, 0
    while layer is not None and depth < 64:
        logs = getattr(layer, "full_observations", None)
        if isinstance(logs, dict):
            logs.clear()
        layer, depth = getattr(layer, "env", None), depth + 1


def make_textarena(env_id: str, kwargs: dict[str, Any]) -> Any:
    ta = _ta()
    from textarena.envs.registration import ENV_REGISTRY

    if env_id not in ENV_REGISTRY:
        raise unknown_id(NAME, "id", env_id, ENV_REGISTRY)
    try:
        return ta.make(env_id, **kwargs)
    except TypeError as error:
        spec = ENV_REGISTRY[env_id]
        module, _, attr = str(spec.entry_point).partition(":")
        params = inspect.signature(getattr(importlib.import_module(module), attr)).parameters
        raise bad_options(NAME, f"TextArena game {env_id!r}", kwargs, [p for p in params if p != "self"],
                          error) from None
    except ImportError as error:
        raise ConfigError(f"env {NAME!r}: TextArena game {env_id!r} cannot be imported: {error}") from None
    except LookupError as error:  # nltk data the game loads at construction
        found = re.search(r"Resource '?(\w+)'? not found", str(error))
        resource = found.group(1) if found else "its"
        raise ConfigError(f"env {NAME!r}: {env_id!r} needs nltk's {resource!r} data (a download): run `python -m "
                          f"nltk.downloader {resource}` where the hub is reachable, or choose another id") from None
    except ValueError as error:
        if "API key" in str(error) or "API_KEY" in str(error):  # games that call a hosted model (OpenRouter)
            raise ConfigError(f"env {NAME!r}: {env_id!r} calls a hosted model and needs its key and the network: "
                              f"{error}; refused at start") from None
        raise


def random_move(observation: str, rng: random.Random) -> str:
    """The scripted opponent: one of the bracketed moves in the latest part of its observation (games list their
    legal moves so), else a bracketed number."""
    tail = observation[-2000:]
    moves = _BRACKETED.findall(tail.rsplit("Available Moves", 1)[-1]) or _BRACKETED.findall(tail)
    moves = [m for m in dict.fromkeys(moves) if m not in ("[GAME]", "[Player]")]
    return rng.choice(moves) if moves else f"[{rng.randint(0, 9)}]"


class ModelOpponent:
    """Greedy replies from an HF causal LM, loaded once per process and shared by the envs of a worker."""

    _cache: ClassVar[dict[tuple[str, int], tuple[Any, Any]]] = {}

    def __init__(self, model: str, max_new_tokens: int) -> None:
        self.model = model
        self.max_new_tokens = max_new_tokens

    def _load(self) -> tuple[Any, Any]:
        key = (self.model, self.max_new_tokens)
        if key not in self._cache:
            from agentforge.models.loading import load_hf_model, load_tokenizer, resolve_model

            named = self.model in ("smollm2-135m", "tiny")
            spec = resolve_model({"name": self.model, "dtype": "float32"} if named
                                 else {"name": "hf", "path": self.model, "dtype": "float32"})
            self._cache[key] = (load_tokenizer(spec), load_hf_model(spec))
        return self._cache[key]

    def __call__(self, observation: str, rng: random.Random) -> str:
        import torch

        tokenizer, model = self._load()
        ids = tokenizer.apply_chat_template([{"role": "user", "content": observation[-4000:]}],
                                            add_generation_prompt=True, return_tensors="pt", return_dict=True)
        with torch.no_grad():
            out = model.generate(**ids, do_sample=False, max_new_tokens=self.max_new_tokens,
                                 pad_token_id=tokenizer.eos_token_id)
        return str(tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))


def make_opponent(opponent: str, opponent_model: str, max_new_tokens: int) -> Opponent:
    if opponent == "random":
        return random_move
    if opponent == "model":
        return ModelOpponent(opponent_model, max_new_tokens)
    if ":" in opponent:
        module, _, attr = opponent.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
        except (ImportError, AttributeError) as error:
            raise ConfigError(f"env {NAME!r}: opponent {opponent!r} cannot be loaded ({error})") from None
    raise unknown_id(NAME, "opponent", opponent, [*BUILTIN_OPPONENTS, "pkg.module:callable"])


def observation_text(observation: Any) -> str:
    """TextArena's default wrappers give a string; raw ids give (from, message, type) tuples."""
    if isinstance(observation, str):
        return observation
    return "\n".join(str(m[1]) if isinstance(m, tuple) and len(m) >= 2 else str(m) for m in observation)


@ENVS.register(NAME)
class TextArenaEnv:
    """A TextArena game; the policy plays `player`, the opponent every other side."""

    option_help: ClassVar[dict[str, str]] = {
        "id": "the TextArena id (GuessTheNumber-v0, TowerOfHanoi-v0, TicTacToe-v0, Nim-v0 ...; -raw ids: no wrappers)",
        "kwargs": "keyword arguments for textarena.make (the game's constructor)",
        "num_players": "players (null: the fewest the game accepts, tried from 1)",
        "player": "the side the policy plays: a player id, or -1 for seed % num_players (both sides over a run); "
                  "ignored with opponent=self",
        "opponent": "the other sides: random (seeded bracketed move) | model (greedy HF model) | pkg.module:callable "
                    "| self (self-play: the policy plays and trains every side, a group per side)",
        "opponent_model": "opponent=model: smollm2-135m, tiny, or an HF folder (a checkpoint's model/ folder)",
        "opponent_max_new_tokens": "opponent=model: tokens per move",
        "action_format": "how the agent's action text is handed to the game (Python format string; TextArena games "
                         "read [move])",
    }

    def __init__(self, id: str = "GuessTheNumber-v0", kwargs: dict[str, Any] | None = None,  # noqa: A002
                 num_players: int | None = None, player: int = 0, opponent: str = "random",
                 opponent_model: str = "smollm2-135m", opponent_max_new_tokens: int = 32,
                 action_format: str = "[{action}]") -> None:
        check_action_format(NAME, action_format)
        self.env_id = str(id)
        self.action_format = action_format
        self._kwargs = plain_kwargs(kwargs)
        self._rng = PrivateRng()
        with self._rng.active():
            self._env = make_textarena(self.env_id, self._kwargs)
        self.num_players = int(num_players) if num_players is not None else self._probe_players()
        if self.num_players < 1:
            raise ConfigError(f"env {NAME!r}: num_players must be >= 1, got {num_players}")
        if player != -1 and not 0 <= player < self.num_players:
            raise ConfigError(f"env {NAME!r}: player={player}; valid: -1 (seed % num_players) or 0.."
                              f"{self.num_players - 1}")
        self.player_option = int(player)
        self.self_play = str(opponent) == SELF_PLAY
        if self.self_play and self.num_players < 2:
            raise ConfigError(f"env {NAME!r}: opponent=self (self-play) needs a game of two or more players, but "
                              f"{self.env_id!r} is played by {self.num_players}; choose a two-player game "
                              "(TicTacToe-v0, Nim-v0 ...) or drop opponent=self")
        self.opponent = make_opponent(str(opponent), str(opponent_model), int(opponent_max_new_tokens)) \
            if self.num_players > 1 and not self.self_play else None
        self._key_env: Any = None  # task keys reset their own game, never the episode's
        self._key_rng = PrivateRng()
        self.done = True

    def _probe_players(self) -> int:
        errors = []
        for count in (1, 2, 3, 4):
            try:
                with self._rng.active():
                    self._env.reset(num_players=count, seed=0)
                return count
            except (AssertionError, ValueError, KeyError, IndexError) as error:
                errors.append(f"{count}: {error}")
        raise ConfigError(f"env {NAME!r}: {self.env_id!r} accepted no player count from 1 to 4 ({'; '.join(errors)});"
                          " set num_players")

    @classmethod
    def check_options(cls, options: dict[str, Any], splits: Sequence[str]) -> None:
        """The game, options and opponent are valid; a model opponent's folder exists (it loads in the workers)."""
        env = cls(**options)
        env.close()
        model = str(options.get("opponent_model", "smollm2-135m"))
        if options.get("opponent") == "model" and model not in ("smollm2-135m", "tiny"):
            from pathlib import Path

            if not (Path(model) / "config.json").is_file():
                raise ConfigError(f"env {NAME!r}: opponent_model {model!r} is not an HF model folder (no config.json);"
                                  " use smollm2-135m, tiny, or a checkpoint's model/ folder")

    def reset(self, task: Task) -> Observation:
        self.player = task.seed % self.num_players if self.player_option == -1 else self.player_option
        self._rng.seed(task.seed)
        self._opponent_rng = random.Random(task.seed)
        forget_earlier_games(self._env)
        with self._rng.active():
            self._env.reset(num_players=self.num_players, seed=task.seed)
            # the game can end before the policy's first turn (an opponent's invalid moves): the next step then
            # reports that end without playing its action (reset cannot say done in the Env protocol)
            self._ended_before_turn = False if self.self_play else self._play_opponents()
        self.done = False
        self.rewards: dict[int, float] = {}
        return self._observation()

    def task_key(self, task: Task) -> str:
        """The task's content (agentforge/envs/task_keys.py): the game's `state.game_state` after `reset(num_players,
        seed)` (the secret number, the board, the piles), who moves first, and the side the policy plays (`all` in
        self-play). The opponent's moves are not in it: they are the sampling that plays a task, like the policy's.
        A game whose start does not depend on the seed (TicTacToe's empty board) starts every seed alike, and the
        keyer says so."""
        self._key_rng.seed(task.seed)
        with self._key_rng.active():
            if self._key_env is None:
                self._key_env = make_textarena(self.env_id, self._kwargs)
            forget_earlier_games(self._key_env)  # its wrappers' logs would grow with every key
            self._key_env.reset(num_players=self.num_players, seed=task.seed)
        state = self._key_env.state
        side = "all" if self.self_play else \
            (task.seed % self.num_players if self.player_option == -1 else self.player_option)
        content = {"game_state": plain_fields(dict(getattr(state, "game_state", None) or {})),
                   "first": plain_data(getattr(state, "current_player_id", None)), "side": side}
        return f"{NAME}:{self.env_id}:" + json.dumps(content, sort_keys=True, ensure_ascii=False)

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError(f"this {self.env_id} episode is over (done=True); call reset() before stepping again")
        if self._ended_before_turn:
            out: dict[str, Any] = {EXECUTABLE: False, INVALID: "the game ended before the policy's turn",
                                   SIDE: self.player}
            with self._rng.active():
                reward, won = self._finish(out)
            self.done = True
            return StepResult(self._observation(), reward, True, won, out)
        with self._rng.active():
            state = self._env.state
            errors_before = int(getattr(state, "error_count", 0))
            done, info = self._env.step(self.action_format.format(action=action))
            ended_invalid = getattr(state, "game_info", {}).get(self.player, {}).get("invalid_move")
            invalid = int(getattr(state, "error_count", 0)) > errors_before or bool(ended_invalid)
            reason = self._last_admin_message() if invalid else ""  # read before get_observation() clears it
            if not done and not self.self_play:
                done = self._play_opponents()
        out = {EXECUTABLE: not invalid}
        out.update({k: v for k, v in dict(info or {}).items() if isinstance(v, (bool, int, float, str))})
        out[SIDE] = self.player  # the side that moved
        if invalid:
            out[INVALID] = "TextArena refused the move (it counts against the game's error allowance): " + \
                str(out.get("reason") or reason)
        reward, won = 0.0, False
        if done:
            reward, won = self._finish(out)
        self.done = bool(done)
        return StepResult(self._observation(), reward, self.done, won, out)

    def _play_opponents(self) -> bool:
        """Let the other sides move until it is the policy's turn or the game ends (inside the env's RNG)."""
        for _ in range(_MAX_OPPONENT_MOVES):
            current, observation = self._env.get_observation()
            if current == self.player:
                return False
            assert self.opponent is not None
            done, _ = self._env.step(self.opponent(observation_text(observation), self._opponent_rng))
            if done:
                return True
        raise RuntimeError(f"{self.env_id}: the opponent moved {_MAX_OPPONENT_MOVES} times without the policy's "
                           "turn coming round")

    def _finish(self, out: dict[str, Any]) -> tuple[float, bool]:
        closed = self._env.close()
        rewards, game_info = closed if isinstance(closed, tuple) else (closed, {})
        self.rewards = {int(k): float(v) for k, v in dict(rewards or {}).items()}
        winners = [side for side in self.rewards if self._wins(side)]
        reason = dict(game_info or {}).get(self.player, {}).get("reason")
        if reason:
            out["reason"] = str(reason)
        out[REWARDS] = dict(self.rewards)
        if self.num_players > 1:
            out[WINNERS] = winners
        return self.rewards.get(self.player, 0.0), self.player in winners

    def _wins(self, side: int) -> bool:
        """Single-player: the game's reward reaches 1; else the side's reward beats every other side's."""
        mine = self.rewards[side]
        others = [v for k, v in self.rewards.items() if k != side]
        return mine >= 1.0 if self.num_players == 1 else bool(others) and mine > max(others)

    def _last_admin_message(self) -> str:
        messages = getattr(self._env.state, "observations", {}).get(self.player, [])
        for message in reversed(messages):
            if isinstance(message, tuple) and len(message) >= 2 and "invalid move" in str(message[1]).lower():
                return str(message[1])
        return "see the observation"

    def _observation(self) -> Observation:
        """The game's text for the side to move; in self-play that side is the one the agent plays next."""
        with self._rng.active():
            current, observation = self._env.get_observation()
        text = observation_text(observation)
        info: dict[str, Any] = {SIDE: self.player}
        if self.self_play:
            self.player = int(current)
            info = {SIDE: self.player, SIDES: self.num_players}
        return Observation(text=text, anchor=text, admissible=None, info=info)

    def close(self) -> None:
        pass  # TextArena's close() ends a game (it returns the rewards); nothing else is held
