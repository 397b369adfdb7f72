"""Gymnasium envs with a discrete action space as text envs (`env=gym env.id=FrozenLake-v1`).

The observation is the env's own `ansi` render where it has one (toy-text envs: FrozenLake, CliffWalking, Taxi),
else the raw observation written out (Blackjack's tuple, a `Text` space's string). Actions are the discrete
action space's indices under the names the Gymnasium docs give them (FrozenLake: left/down/right/up), so the agent
loop's admissible-action parsing applies; `action_names` renames them. Seeds go to `reset(seed=...)` (Gymnasium
envs own their `np_random`), so a task seed gives the same map, slips and cards in every process.

Gymnasium has no notion of success: `success` picks the rule (docs/environments.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

from agentforge.envs.adapters.common import INVALID, bad_options, import_library, plain_kwargs, unknown_id
from agentforge.envs.base import ENVS, EXECUTABLE, echo
from agentforge.errors import ConfigError
from agentforge.types import Observation, StepResult, Task

NAME = "gym"
EXTRA = "gym"
# Action names of Gymnasium's toy-text envs, as their documentation lists them (index order).
ACTION_NAMES: dict[str, tuple[str, ...]] = {
    "FrozenLake": ("left", "down", "right", "up"),
    "FrozenLake8x8": ("left", "down", "right", "up"),
    "CliffWalking": ("up", "right", "down", "left"),
    "CliffWalkingSlippery": ("up", "right", "down", "left"),
    "Taxi": ("south", "north", "east", "west", "pickup", "dropoff"),
    "Blackjack": ("stick", "hit"),
}
SUCCESS_RULES = ("positive_reward", "terminated")
_HIGHLIGHT = re.compile(r"\x1b\[4[0-7]m(.)\x1b\[0m")  # a background-highlighted cell: the agent in toy-text renders
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ansi_to_text(text: str, marker: str) -> str:
    """A toy-text `ansi` render as plain text: the highlighted (agent's) cell becomes `marker`, colours dropped."""
    return _ANSI.sub("", _HIGHLIGHT.sub(marker, text)).strip("\n")


def _gym() -> Any:
    return import_library("gymnasium", EXTRA, NAME)


def text_env_ids() -> list[str]:
    """Registered ids a user is likely to mean: Gymnasium's toy-text envs and every id a plugin registered."""
    gym = _gym()
    return sorted(k for k, spec in gym.registry.items()
                  if "toy_text" in str(spec.entry_point) or not str(spec.entry_point).startswith("gymnasium."))


def make_gym(env_id: str, kwargs: dict[str, Any], max_steps: int | None) -> Any:
    """`gymnasium.make` with the id and kwargs checked first, so bad ones are named with the valid ones."""
    gym = _gym()
    if env_id not in gym.registry:
        raise unknown_id(NAME, "id", env_id, text_env_ids())
    extra: dict[str, Any] = {"max_episode_steps": max_steps} if max_steps is not None else {}
    spec = gym.registry[env_id]
    try:
        env = gym.make(env_id, **extra, **kwargs)
    except TypeError as error:
        raise bad_options(NAME, f"gymnasium env {env_id!r}", kwargs, _constructor_params(spec), error) from None
    except gym.error.Error as error:  # deprecated versions, missing dependencies of an env
        raise ConfigError(f"env {NAME!r}: gymnasium cannot make {env_id!r}: {error}") from None
    if "ansi" in env.metadata.get("render_modes", []):  # the text render, where the env has one
        env.close()
        env = gym.make(env_id, render_mode="ansi", **extra, **kwargs)
    space = env.action_space
    if not isinstance(space, gym.spaces.Discrete):
        env.close()
        raise ConfigError(f"env {NAME!r}: {env_id!r} has action space {space}; the gym adapter plays envs with a "
                          "Discrete action space (an LLM picks one named action per turn)")
    return env


def _constructor_params(spec: Any) -> list[str]:
    import inspect

    entry = spec.entry_point
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        import importlib

        entry = getattr(importlib.import_module(module), attr)
    return [p for p in inspect.signature(entry).parameters if p not in ("self", "render_mode", "kwargs", "args")]


@ENVS.register(NAME)
class GymEnv:
    """A Gymnasium env with a discrete action space, one named action per turn."""

    # the SFT warm start's expert (`envs.base.expert_for`): a path, so this module does not import it
    expert: ClassVar[str] = "agentforge.envs.adapters.gym:expert_actions"
    descriptors: ClassVar[dict[str, str]] = {
        "state_coverage": "agentforge.envs.adapters.gym_descriptors:gym_state_coverage"}

    option_help: ClassVar[dict[str, str]] = {
        "id": "the Gymnasium id (toy-text: FrozenLake-v1, FrozenLake8x8-v1, CliffWalking-v1, Taxi-v4, Blackjack-v1)",
        "kwargs": "keyword arguments for gymnasium.make (e.g. {is_slippery: false, map_name: 4x4})",
        "max_steps": "episode step limit (gymnasium's TimeLimit; null: the id's max_episode_steps)",
        "action_names": "names of the discrete actions in index order (null: the Gymnasium docs' names, else 0..n-1)",
        "success": "positive_reward (terminated with a reward > 0: FrozenLake's goal, Blackjack's win) | terminated "
                   "(reaching a terminal state: CliffWalking's goal); info['is_success'] wins where an env sets it",
        "agent_marker": "the character the highlighted (agent's) cell of an ansi render is shown as",
        "map_per_seed": "FrozenLake ids only: a random n x n lake per task seed (gymnasium's generate_random_map(n, "
                        "seed=task seed); seeds differ, maps can repeat: the held-out filter keeps eval lakes out of "
                        "training) (null: the id's fixed map)",
    }

    def __init__(self, id: str = "FrozenLake-v1", kwargs: dict[str, Any] | None = None,  # noqa: A002
                 max_steps: int | None = None, action_names: Sequence[str] | None = None,
                 success: str = "positive_reward", agent_marker: str = "P", map_per_seed: int | None = None) -> None:
        if success not in SUCCESS_RULES:
            raise unknown_id(NAME, "success", success, SUCCESS_RULES)
        if max_steps is not None and max_steps < 1:
            raise ConfigError(f"env {NAME!r}: max_steps must be >= 1 or null, got {max_steps}")
        self.env_id = str(id)
        self.success = success
        self.agent_marker = agent_marker
        self._kwargs = plain_kwargs(kwargs)
        self._max_steps = max_steps
        self.map_per_seed = map_per_seed
        if map_per_seed is not None:
            if not self.env_id.startswith("FrozenLake") or map_per_seed < 2:
                raise ConfigError(f"env {NAME!r}: map_per_seed={map_per_seed} needs a FrozenLake id and a size >= 2 "
                                  f"(got id {self.env_id!r}); null keeps the id's map")
            clash = {"desc", "map_name"} & set(self._kwargs)
            if clash:
                raise ConfigError(f"env {NAME!r}: map_per_seed draws the map; drop kwargs {sorted(clash)}")
        self._env = make_gym(self.env_id, self._map_kwargs(0), max_steps)
        count = int(self._env.action_space.n)
        family = self.env_id.split("-v")[0].split("/")[-1]
        names = list(action_names) if action_names is not None else list(ACTION_NAMES.get(family, ()))
        if not names or len(names) != count:
            if action_names is not None:
                self._env.close()
                raise ConfigError(f"env {NAME!r}: {self.env_id} has {count} actions; action_names lists "
                                  f"{len(names)}: {list(names)}")
            names = [str(i) for i in range(count)]
        self.actions = [str(n) for n in names]
        self._index = {n.lower(): i for i, n in enumerate(self.actions)}
        self._ansi = self._env.render_mode == "ansi"
        self._key_env: Any = None  # task keys reset their own gym env, never the episode's
        self.done = True

    @classmethod
    def check_options(cls, options: dict[str, Any], splits: Sequence[str]) -> None:
        """Build the env once in the driver: a bad id, kwargs or action names fail before anything starts."""
        cls(**options).close()

    def _map_kwargs(self, seed: int) -> dict[str, Any]:
        if self.map_per_seed is None:
            return dict(self._kwargs)
        from gymnasium.envs.toy_text.frozen_lake import generate_random_map

        return {**self._kwargs, "desc": generate_random_map(size=int(self.map_per_seed), seed=seed)}

    def reset(self, task: Task) -> Observation:
        if self.map_per_seed is not None:  # a new lake for this seed (the map is a constructor argument in gymnasium)
            self._env.close()
            self._env = make_gym(self.env_id, self._map_kwargs(task.seed), self._max_steps)
        obs, _ = self._env.reset(seed=task.seed)
        self.done = False
        self.steps = 0
        return self._observation(obs)

    def task_key(self, task: Task) -> str:
        """The task's content (agentforge/envs/task_keys.py): with `map_per_seed`, the lake (small lakes repeat: 152
        distinct 4x4 lakes in 200 seeds); else the start the seed gives, as this adapter renders it plus the raw
        observation (Taxi's render marks the passenger and destination only by colour, which the text drops; its
        observation holds them). A fixed map starts every seed alike, and the keyer says so."""
        if self.map_per_seed is not None:
            return f"{NAME}:{self.env_id}:" + "/".join(self._map_kwargs(task.seed)["desc"])
        if self._key_env is None:
            self._key_env = make_gym(self.env_id, self._kwargs, self._max_steps)
        obs, _ = self._key_env.reset(seed=task.seed)
        return f"{NAME}:{self.env_id}:{obs!r}:" + self._render(self._key_env, obs)

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError(f"this {self.env_id} episode is over (done=True); call reset() before stepping again")
        index = self._index.get(" ".join(str(action).split()).lower())
        if index is None:  # the library cannot even represent it: nothing is stepped
            reason = f"unknown action {echo(repr(action))}; admissible actions: {', '.join(self.actions)}"
            return StepResult(self._last, 0.0, False, False, {EXECUTABLE: False, INVALID: reason})
        obs, reward, terminated, truncated, info = self._env.step(index)
        self.steps += 1
        self.done = bool(terminated or truncated)
        if "is_success" in info:
            won = bool(info["is_success"])
        elif self.success == "terminated":
            won = bool(terminated)
        else:
            won = bool(terminated) and float(reward) > 0
        out = {EXECUTABLE: True, "terminated": bool(terminated), "truncated": bool(truncated), "steps": self.steps,
               "state": repr(obs)}
        out.update({k: v for k, v in info.items() if isinstance(v, (bool, int, float, str))})
        return StepResult(self._observation(obs), float(reward), self.done, won, out)

    def close(self) -> None:
        self._env.close()
        if self._key_env is not None:
            self._key_env.close()
            self._key_env = None

    def _render(self, env: Any, obs: Any) -> str:
        return ansi_to_text(str(env.render()), self.agent_marker) if self._ansi else f"Observation: {obs}"

    def _observation(self, obs: Any) -> Observation:
        text = self._render(self._env, obs)
        # the raw observation (FrozenLake's cell index) is the state; the render also shows the last action taken
        self._last = Observation(text=text, anchor=repr(obs), admissible=list(self.actions))
        return self._last


def frozenlake_plan(desc: Sequence[Sequence[Any]]) -> list[str] | None:
    """A shortest walk from S to G over frozen cells (breadth-first), as action names; None when G is cut off.

    agentforge's own planner, not Gymnasium's (it has none): the warm start's expert for FrozenLake ids. It plans
    on the map as if the ice were not slippery; on slippery ice the walk may fail and the warm start skips it.
    """
    from collections import deque

    grid = [[c.decode() if isinstance(c, bytes) else str(c) for c in row] for row in desc]
    rows, cols = len(grid), len(grid[0])
    start = next((r, c) for r in range(rows) for c in range(cols) if grid[r][c] == "S")
    moves = {"left": (0, -1), "down": (1, 0), "right": (0, 1), "up": (-1, 0)}
    previous: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    frontier = deque([start])
    while frontier:
        cell = frontier.popleft()
        if grid[cell[0]][cell[1]] == "G":
            plan: list[str] = []
            while previous[cell] is not None:
                cell, action = previous[cell]  # type: ignore[misc]
                plan.append(action)
            return plan[::-1]
        for action, (dr, dc) in moves.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < rows and 0 <= nxt[1] < cols and nxt not in previous and grid[nxt[0]][nxt[1]] != "H":
                previous[nxt] = (cell, action)
                frontier.append(nxt)
    return None


def expert_actions(task: Task, env_options: dict[str, Any] | None = None) -> list[str] | None:
    """FrozenLake: the planner's walk on the task's lake (other gym ids have no expert: None)."""
    env = GymEnv(**dict(env_options or {}))
    try:
        if not env.env_id.startswith("FrozenLake") or env.actions != list(ACTION_NAMES["FrozenLake"]):
            return None
        env.reset(task)
        return frozenlake_plan(env._env.unwrapped.desc)
    finally:
        env.close()
