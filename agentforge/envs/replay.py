"""Replay an action sequence from a task's initial state, step by step, saying which actions the env carried out.

Why: counterfactual credit (TrajEvolve drops one step of a won episode and replays the rest to see whether it
still wins, and which later steps became inexecutable) and branching (replay a prefix, then let the policy go on
from there) both need the exact states an episode went through. Envs are deterministic given the task and the
actions (`agentforge.envs.base`), so a replay reproduces observations, rewards and the episode's end.

`replay` runs on one in-process env. Through a pool: `EnvPool.replay(requests)` runs many replays, batched over the
workers, without touching the pool's episodes; `EnvPool.reset(tasks, prefixes)` / `reset_with_prefixes` branch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentforge.envs.base import EXECUTABLE, Env, action_executable, is_replayable
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.types import Observation, Task


class ReplayError(AgentforgeError):
    """An env raised while replaying an action sequence; the message names the env, the task and the action."""


@dataclass
class ReplayStep:
    """One replayed action and what the env answered; `executable` is the env's `info["executable"]`."""

    action: str
    observation: Observation
    reward: float
    done: bool
    won: bool
    executable: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReplayResult:
    """A replayed episode: the first observation, one `ReplayStep` per action played, and the actions left unplayed
    because the episode ended first (with `stop_when_done`)."""

    task: Task
    initial_observation: Observation
    steps: list[ReplayStep] = field(default_factory=list)
    unplayed: list[str] = field(default_factory=list)

    @property
    def observation(self) -> Observation:
        """The observation the replay ends on: where a branch continues."""
        return self.steps[-1].observation if self.steps else self.initial_observation

    @property
    def done(self) -> bool:
        return bool(self.steps) and self.steps[-1].done

    @property
    def won(self) -> bool:
        return any(step.won for step in self.steps)

    @property
    def total_reward(self) -> float:
        return float(sum(step.reward for step in self.steps))

    @property
    def actions(self) -> list[str]:
        """The actions played (executable or not)."""
        return [step.action for step in self.steps]

    @property
    def executed_actions(self) -> list[str]:
        """The actions the env carried out (inexecutable ones left out)."""
        return [step.action for step in self.steps if step.executable]

    @property
    def inexecutable_steps(self) -> list[int]:
        """Indices (into `steps`) of the actions the env did not carry out."""
        return [i for i, step in enumerate(self.steps) if not step.executable]


def env_label(env: Any, task: Task) -> str:
    """How errors name an env: the task's env name and the class that plays it."""
    return f"env {task.env!r} ({type(env).__name__})"


def check_replayable(env: Any, task: Task) -> None:
    """Refuse an env that declares `replayable = False`: its replays would not reproduce the episode."""
    if is_replayable(env):
        return
    note = str(getattr(env, "replay_note", "") or "").strip()
    raise ConfigError(
        f"{env_label(env, task)} cannot replay action sequences: it declares replayable = False (the same task and "
        f"actions may not reach the same states){': ' + note if note else ''}. Replay, branching with prefixes and "
        "counterfactual step labels need an env that is deterministic given the task and the actions."
    )


def _describe_error(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def replay(env: Env, task: Task, actions: Sequence[str], stop_when_done: bool = True) -> ReplayResult:
    """Reset `env` on `task` and play `actions` in order, recording each step.

    With `stop_when_done` the replay stops when the episode ends and the remaining actions are returned in
    `unplayed`; without it an episode that ends before the last action is an error (a recorded sequence that
    does not fit its task). Env exceptions come back as ReplayError naming the env, the task and the action.
    """
    check_replayable(env, task)
    actions = checked_actions(actions)
    try:
        initial = env.reset(task)
    except Exception as err:
        raise ReplayError(f"{env_label(env, task)} raised while resetting on {task.describe()} to replay "
                          f"{len(actions)} actions: {_describe_error(err)}") from err
    result = ReplayResult(task, initial)
    for index, action in enumerate(actions):
        if result.done:
            if stop_when_done:
                result.unplayed = actions[index:]
                break
            raise ReplayError(
                f"{env_label(env, task)}: the episode of {task.describe()} ended after action {index} of "
                f"{len(actions)}, so {len(actions) - index} actions cannot be replayed (first: {action!r}); pass "
                "stop_when_done=True to stop at the end instead"
            )
        try:
            step = env.step(action)
        except Exception as err:
            raise ReplayError(f"{env_label(env, task)} raised at action {index} ({action!r}) while replaying "
                              f"{task.describe()}: {_describe_error(err)}") from err
        result.steps.append(ReplayStep(action, step.observation, float(step.reward), bool(step.done),
                                       bool(step.won), action_executable(step), step.info))
    return result


def checked_actions(actions: Sequence[str]) -> list[str]:
    """The actions as a list of strings; a bare string (a common slip: one action, not a list) is refused."""
    if isinstance(actions, str):
        raise TypeError(f"replay takes a list of actions, got the single string {actions!r}; wrap it in a list")
    actions = list(actions)
    bad = next((i for i, a in enumerate(actions) if not isinstance(a, str)), None)
    if bad is not None:
        raise TypeError(f"replay actions must be strings; action {bad} is {type(actions[bad]).__name__}: "
                        f"{actions[bad]!r}")
    return actions


__all__ = ["EXECUTABLE", "ReplayError", "ReplayResult", "ReplayStep", "check_replayable", "checked_actions",
           "env_label", "replay"]
