"""The Env protocol and the env registry. Envs are pure Python objects; pools decide where they live."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from agentforge.registry import Registry
from agentforge.types import Observation, StepResult, Task

EXECUTABLE = "executable"  # the StepResult.info key that says whether the env carried the action out
# games the policy plays on several sides (rollout/sides.py splits their episodes per side):
SIDE = "player"  # Observation/turn info: the side that acts in this state
SIDES = "sides"  # Observation info: how many sides the policy plays (> 1: self-play)
REWARDS = "rewards"  # the final step's info: {side: reward}
WINNERS = "winners"  # the final step's info: the sides that won (none on a draw)


@runtime_checkable
class Env(Protocol):
    """A text environment. Deterministic given the task (seed) and the actions, so episodes can be replayed.

    Two optional declarations serve replay and branching (`agentforge.envs.replay`) and crash recovery:

    * `info["executable"]` (bool) on every `StepResult`: False when the env did not carry the action out, so the
      state is what it was (the step may still count against the step limit). Every bundled env sets it: ALFWorld
      when the engine answers "Nothing happens." (and the intervention env when it rejects a command naming an
      unavailable location), Sokoban for a move into a wall or an unpushable box, WebShop for a click the page
      does not offer or a search off the search page, ScienceWorld for input the simulator cannot parse (and the
      refused `reset task`), search QA for text that is neither `search[...]` nor `answer[...]`. An env that does
      not set the key is read as executing every action (`action_executable`).
    * `replayable` (class or instance attribute, default True): False when the same task and actions can reach
      different states (unseeded randomness, a live service, a user in the loop). Replaying on such an env is an
      error that names it; `replay_note` (str, optional) says why it cannot replay.
    * `expert` (class attribute, optional): `"pkg.module:function"` (or the function) giving the actions that solve
      a task, `function(task, env_options) -> list[str] | None` (None: it cannot); the SFT warm start
      (`training.sft`, `agentforge sft`, `trainer.warm_start=expert`) plays them. An env declares its own expert
      beside itself; `expert_for(name)` finds it.
    """

    def reset(self, task: Task) -> Observation: ...

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...


ENVS: Registry[type] = Registry("env")
ECHO_CHARS = 200  # how much of a model's action an env repeats in an observation or error message


def echo(text: str, limit: int = ECHO_CHARS) -> str:
    """A model's action as an env quotes it back: clipped, so a 100k-character response cannot grow the next
    prompt past its token budget (the rollout would stop with a prompt-too-long error)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def make_env(name: str, options: dict[str, Any] | None = None) -> Env:
    """Build a registered env by name with its options (the `env` config group minus `name`)."""
    import agentforge.envs  # noqa: F401  (registers the built-in envs)

    return ENVS.get(name)(**(options or {}))


def expert_for(name: str) -> Callable[[Task, dict[str, Any]], list[str] | None]:
    """The env's own expert (`expert_actions` on its class), or a clear error naming the env."""
    import agentforge.envs  # noqa: F401  (registers the built-in envs)
    from agentforge.errors import ConfigError

    expert = getattr(ENVS.get(name), "expert", None)
    if expert is None:
        with_experts = [n for n in ENVS.names() if getattr(ENVS.get(n), "expert", None) is not None]
        raise ConfigError(f"env {name!r} has no expert (no `expert` on its class), so it cannot make SFT data; envs "
                          f"with one: {', '.join(with_experts)}. Use trainer.warm_start=rft or false, or give the env "
                          "an `expert = \"pkg.module:function\"` class attribute (function(task, env_options))")
    if isinstance(expert, str):
        module, _, attr = expert.partition(":")
        expert = getattr(importlib.import_module(module), attr)
    return expert


def drawing_for(name: str) -> Any:
    """The env's drawing for `agentforge view` (`drawing = "pkg.module:NAME"` on its class, an
    `agentforge.viewer.drawings.EnvDrawing`), or None when it has none."""
    import agentforge.envs  # noqa: F401  (registers the built-in envs)

    drawing = getattr(ENVS.get(name), "drawing", None)
    if isinstance(drawing, str):
        module, _, attr = drawing.partition(":")
        drawing = getattr(importlib.import_module(module), attr)
    return drawing


def declared_descriptors() -> dict[str, tuple[str, str]]:
    """Every env's trajectory descriptors (`descriptors = {name: "pkg.module:function"}` on its class): name ->
    (the env that declares it, the function's path). An env class owns its descriptors as it owns its expert."""
    import agentforge.envs  # noqa: F401  (registers the built-in envs)

    found: dict[str, tuple[str, str]] = {}
    for env in ENVS.names():  # the class that declares them, not a subclass that inherits them (a test's variant)
        for name, path in (vars(ENVS.get(env)).get("descriptors") or {}).items():
            found.setdefault(name, (env, path))
    return found


def acted_turns(trajectory: Any) -> list[Any]:
    """Turns whose action was parsed and sent to the env (invalid-format turns carry no action)."""
    return [turn for turn in trajectory.turns if turn.action is not None]


def check_env_class(env_class: Any, label: str, options: dict[str, Any], splits: Sequence[str]) -> None:
    """An env class accepts these options and (when it says how) has data for `splits`; `label` names it in the
    error (e.g. "env 'sokoban'", or "env.envs.sokoban: env 'sokoban'" for a member of a mix)."""
    import inspect

    from agentforge.errors import ConfigError

    try:
        inspect.signature(env_class).bind(**options)
    except TypeError as error:
        params = [p for p in inspect.signature(env_class).parameters if p not in ("self", "args", "kwargs")]
        raise ConfigError(f"{label} does not take these options ({error}); its options are: "
                          f"{', '.join(params) or '(none)'}") from None
    check = getattr(env_class, "check_options", None)
    if callable(check):
        check(dict(options), list(splits))


def action_executable(result: StepResult) -> bool:
    """Whether the env carried out the step's action; envs that do not say are taken to execute every action."""
    return bool(result.info.get(EXECUTABLE, True))


def is_replayable(env: Any) -> bool:
    """Whether an env (or env class) declares that replaying a task's actions reproduces its episode."""
    return bool(getattr(env, "replayable", True))
