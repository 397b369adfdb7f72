"""GEM (`gem-llm`) envs as text envs (`env=gem env.id=game:GuessTheNumber-v0-easy`).

GEM's API is Gymnasium's with strings: `reset(seed) -> (obs, info)`, `step(text) -> (obs, reward, terminated,
truncated, info)`. The env parses the action itself (its games read the last `\\boxed{...}`); `action_format` wraps
the agent's `<action>` text into that form first, so a model may write `<action>7</action>`. GEM's games draw from
the global `random`/`numpy.random`, seeded by `reset(seed)`: the adapter keeps those states per env instance
(`PrivateRng`), so one worker can interleave many episodes and still replay each exactly.

Ids that need a download (GEM's math/code/QA envs load Hugging Face datasets; Wordle, Hangman and WordSearch need
nltk's `words` corpus) or a service (search, terminal, MCP tools) are refused at start with what they need.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from agentforge.envs.adapters.common import (
    PrivateRng,
    bad_options,
    check_action_format,
    import_library,
    plain_fields,
    plain_kwargs,
    unknown_id,
)
from agentforge.envs.base import ENVS, EXECUTABLE
from agentforge.errors import ConfigError
from agentforge.types import Observation, StepResult, Task

NAME = "gem"
EXTRA = "gem"
SERVICE_MODULES = ("terminal", "search", "mcp", "tool")  # entry points that need a live service


def _registry() -> dict[str, Any]:
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    import_library("gem", EXTRA, NAME)  # gem's __init__ calls logging.basicConfig(level=INFO): undone below
    root.handlers[:] = handlers
    root.setLevel(level)
    from gem.envs.registration import ENV_REGISTRY

    return ENV_REGISTRY


def needs(env_id: str, spec: Any) -> str | None:
    """What an id needs that this machine may not give it offline (a download, a service), or None."""
    kwargs = dict(spec.kwargs)
    entry = str(spec.entry_point)
    if kwargs.get("dataset_name"):
        return (f"the Hugging Face dataset {kwargs['dataset_name']!r} (a download at start); GEM loads it with "
                "`datasets.load_dataset`, which needs the hub or a local cache")
    if any(f".{part}" in entry for part in SERVICE_MODULES):
        return f"a live service ({entry}: a search engine, a Docker sandbox or an MCP server)"
    return None


def make_gem(env_id: str, kwargs: dict[str, Any]) -> Any:
    """`gem.make` with the id checked, offline needs refused and library errors named."""
    registry = _registry()
    if env_id not in registry:
        raise unknown_id(NAME, "id", env_id, [k for k, s in registry.items() if needs(k, s) is None])
    need = needs(env_id, registry[env_id])
    if need is not None:
        raise ConfigError(f"env {NAME!r}: {env_id!r} needs {need}; refused at start. Offline ids: the `game:` and "
                          "`rg:` families (agentforge envs list; docs/environments.md)")
    import gem

    params = _params(registry[env_id])
    unknown = sorted(set(kwargs) - set(params))
    if unknown:  # GEM's games take **_ and would ignore a misspelt option silently
        raise bad_options(NAME, f"GEM env {env_id!r}", unknown, params)
    try:
        return gem.make(env_id, **kwargs)
    except TypeError as error:
        raise bad_options(NAME, f"GEM env {env_id!r}", kwargs, params, error) from None
    except LookupError as error:  # nltk data
        resource = "words" if "words" in str(error) else "its nltk data"
        raise ConfigError(f"env {NAME!r}: {env_id!r} needs nltk's {resource!r} corpus (a download): run "
                          f"`python -m nltk.downloader {resource}` where the hub is reachable, or choose another id"
                          ) from None
    except ImportError as error:
        raise ConfigError(f"env {NAME!r}: {env_id!r} cannot be imported: {error}") from None


def _params(spec: Any) -> list[str]:
    import importlib
    import inspect

    module, _, attr = str(spec.entry_point).partition(":")
    cls = getattr(importlib.import_module(module), attr)
    return [p for p in inspect.signature(cls).parameters if p not in ("self", "_", "kwargs", "args")]


# GEM attributes that are not content: turn and reset counters, and the id `gem.make` stamps on every env
NOT_CONTENT = ("turn_count", "idx", "env_id", "entry_point")


def game_state(game: Any) -> Any:
    """What a GEM env holds after `reset(seed)`, as plain data: a dataset env's row (question and answer: `rg:` ids
    keep a row index and a reset counter beside it), else the game's public attributes (the secret, the board, the
    settings), less what is not content (`NOT_CONTENT`)."""
    data = getattr(game, "data", None)
    if isinstance(data, dict) and "question" in data:
        return [str(data["question"]), str(data.get("answer"))]
    return plain_fields({name: value for name, value in vars(game).items()
                         if not name.startswith("_") and name not in NOT_CONTENT})


def _swaps_dataset_soon(game: Any) -> bool:
    """GEM's dataset envs (`rg:` ids) draw a new dataset after `size` resets (seed + reset count), so a row would
    depend on how many keys an env had made: the keying env is replaced before that."""
    count, size = getattr(game, "idx", None), getattr(game, "size", None)
    return isinstance(count, int) and isinstance(size, int) and count + 1 >= size


@ENVS.register(NAME)
class GemEnv:
    """A GEM env: the first observation states the task, later ones answer the agent's moves."""

    option_help: ClassVar[dict[str, str]] = {
        "id": "the GEM id (offline: game:GuessTheNumber-v0-easy, game:Mastermind-v0-easy, game:Sudoku-v0-easy, "
              "rg:<reasoning-gym task> ...)",
        "kwargs": "keyword arguments for gem.make (e.g. {max_turns: 6})",
        "action_format": "how the agent's action text is handed to GEM (a Python format string; {action} is the "
                         "text, {{ }} are braces): GEM's games read \\boxed{...}",
        "success_reward": "a step that terminates with at least this reward is a win (GEM's success_reward is 1.0)",
    }

    def __init__(self, id: str = "game:GuessTheNumber-v0-easy", kwargs: dict[str, Any] | None = None,  # noqa: A002
                 action_format: str = "\\boxed{{{action}}}", success_reward: float = 1.0) -> None:
        check_action_format(NAME, action_format)
        self.env_id = str(id)
        self.action_format = action_format
        self.success_reward = float(success_reward)
        self._rng = PrivateRng()
        self._kwargs = plain_kwargs(kwargs)
        with self._rng.active():
            self._env = make_gem(self.env_id, self._kwargs)
        self._key_env: Any = None  # task keys reset their own GEM env, never the episode's
        self._key_rng = PrivateRng()
        self.done = True

    @classmethod
    def check_options(cls, options: dict[str, Any], splits: Sequence[str]) -> None:
        cls(**options).close()

    def format_action(self, action: str) -> str:
        return self.action_format.format(action=action)

    def reset(self, task: Task) -> Observation:
        self._rng.seed(task.seed)
        with self._rng.active():
            obs, _ = self._env.reset(seed=task.seed)
        self.done = False
        return Observation(text=str(obs), anchor=str(obs), admissible=None)

    def task_key(self, task: Task) -> str:
        """The task's content (agentforge/envs/task_keys.py): the game's state after `reset(seed)` (`game_state`), not
        the first observation's text, which some games vary with the seed alone (GuessTheNumber's instructions show
        a random example guess). A game that draws its content later (Minesweeper's mines, at the first reveal)
        starts every seed alike, and the keyer says so."""
        self._key_rng.seed(task.seed)
        with self._key_rng.active():
            if self._key_env is None or _swaps_dataset_soon(self._key_env.unwrapped):
                self._key_env = make_gem(self.env_id, self._kwargs)
            self._key_env.reset(seed=task.seed)
        state = game_state(self._key_env.unwrapped)
        return f"{NAME}:{self.env_id}:" + json.dumps(state, sort_keys=True, ensure_ascii=False)

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError(f"this {self.env_id} episode is over (done=True); call reset() before stepping again")
        with self._rng.active():
            obs, reward, terminated, truncated, info = self._env.step(self.format_action(action))
        self.done = bool(terminated or truncated)
        won = bool(terminated) and float(reward) >= self.success_reward
        out = {EXECUTABLE: True, "terminated": bool(terminated), "truncated": bool(truncated)}
        out.update({k: v for k, v in dict(info).items() if isinstance(v, (bool, int, float, str))})
        return StepResult(Observation(text=str(obs), anchor=str(obs), admissible=None), float(reward), self.done,
                          won, out)

    def close(self) -> None:
        for env in (self._env, self._key_env):
            close = getattr(env, "close", None)
            if callable(close):
                close()
        self._key_env = None
