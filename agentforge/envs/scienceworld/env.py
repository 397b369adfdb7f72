"""ScienceWorld (the `scienceworld` package's simulator) as an agentforge text env.

One env object owns one simulator JVM, started lazily at the first reset and kept for every later episode: an
episode is a task `load` (0.05-0.7 s) plus a `look around`, never a JVM start (~2 s). `close()` stops the JVM.

Steps call the simulator directly instead of the package's `step()`, which also lists every valid action, the room
and the inventory on each call (half the step time, FACTS): that list is fetched only with `admissible: true`.

- Reward: the change of the score (0-100) divided by 100, with negative scores (a failed task) counted as 0, so an
  episode's rewards sum to its final score / 100, in [0, 1]. Some tasks score the start state (8 on
  find-non-living-thing, 50 on some lifespan variations); those are paid with the first step
  (`info["initial_score"]`).
- `won` at score 100; `done` when won, when the simulator says the task is over, when the score goes negative
  (a failed task, as the package's own step does) or after `max_steps` actions.
- Admissible: `admissible: false` (default) → `Observation.admissible = None`, any text goes to the simulator and
  one it cannot parse is a no-op that costs a step (`info["invalid_action"]`, `info["message"]`). With
  `admissible: true` it is the simulator's valid action-object list (hundreds of strings; it names objects by
  their shortest referent and leaves out some actions that do work, e.g. the gold paths' `open door to X`).
- `reset task` (the simulator's "restart this task" command) is refused: one episode per `reset`.
- Ambiguous input (`look at door` with three doors): the simulator asks for a number; the env answers `0` itself
  (the simulator's first match) so one action is one transition, and sets `info["ambiguous"]`.
- Observation text: `Task: <description>` + blank line + the simulator's text (`text.py`); on reset the text is
  the `look around` of the start room. The anchor (GiGPO's state key) is the room (`look`) and inventory with their
  lines sorted (the simulator's object order is not guaranteed) plus the score: the full visible state and task
  progress, independent of what the last action printed.
- Determinism: the simulator iterates hash sets of objects, so by default (`deterministic: true`) its JVM runs
  with constant identity hash codes (`jvm.py`); then the same (task, variation, actions) gives the same
  observations in any JVM, whatever it played before, which replaying episodes after a worker restart relies on.
  With `deterministic: false` the env declares `replayable = False` (replay and branching refuse it).
- `info["executable"]` is False exactly when `info["invalid_action"]` is True (unparsed input, `reset task`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from agentforge.envs.base import ENVS, EXECUTABLE
from agentforge.envs.scienceworld.jvm import jvm_alive, jvm_pid, resolve_java_options, start_simulator, stop_simulator
from agentforge.envs.scienceworld.tasks import (
    pick_task,
    read_all_variations,
    resolve_simplifications,
    resolve_task_names,
    variations_known,
)
from agentforge.envs.scienceworld.text import observation_text
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.types import Observation, StepResult, Task

INVALID_MESSAGES = ("No known action matches that input.", "Unknown action.")
AMBIGUOUS_PREFIX = "Ambiguous request"
BLOCKED_ACTIONS = ("reset task",)
WIN_SCORE = 100


def _normalise(action: str) -> str:
    return " ".join(action.strip().split())


@ENVS.register("scienceworld")
class ScienceWorldEnv:
    """Solve a ScienceWorld task (boil water, find an animal, test conductivity, ...) by typing actions."""

    # the SFT warm start's expert (`envs.base.expert_for`): a path, so this module does not import it
    expert: ClassVar[str] = "agentforge.envs.scienceworld.expert:expert_actions"

    option_help: ClassVar[dict[str, str]] = {
        'task_names': 'tasks to sample from (null: all 30, paper order)',
        'simplifications': "the package's simplification string: easy = teleport, open doors, ...; '' = none",
        'max_steps': 'env steps before the episode ends unpaid',
        'admissible': "true: Observation.admissible = the simulator's valid actions (~+100 ms per step)",
        'java_options': 'JVM options (null: $_JAVA_OPTIONS if set, else -Xmx256m -XX:+UseSerialGC)',
        'deterministic': 'add -XX:hashCode=2 so the same task + actions give the same observations in any JVM',
        'server_path': "another scienceworld.jar (null: the package's own)",
    }

    def __init__(
        self,
        task_names: Sequence[str] | str | None = None,
        simplifications: Sequence[str] | str | None = "easy",
        max_steps: int = 30,
        admissible: bool = False,
        java_options: str | None = None,
        deterministic: bool = True,
        server_path: str | None = None,
    ) -> None:
        if max_steps < 1:
            raise ConfigError(f"scienceworld max_steps must be >= 1, got {max_steps}")
        self.task_names = resolve_task_names(task_names)
        self.simplifications = resolve_simplifications(simplifications)
        self.max_steps = max_steps
        self.admissible = bool(admissible)
        self.java_options = resolve_java_options(java_options, deterministic)
        # without constant hash codes the simulator's object order, and so its texts, can differ between runs
        self.replayable = bool(deterministic)
        self.replay_note = "" if deterministic else "it runs with deterministic: false; set env.deterministic=true"
        self.server_path = server_path
        self._simulator: Any = None
        self.task_name: str | None = None
        self.variation: int | None = None
        self.task_description = ""
        self.score = 0
        self.initial_score = 0
        self._paid = 0
        self.steps_taken = 0
        self.done = False
        self.timings: dict[str, float] = {}

    # -- the JVM --------------------------------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._simulator is not None

    @property
    def jvm_pid(self) -> int | None:
        """The simulator JVM's process id (None before the first reset)."""
        return jvm_pid(self._simulator) if self._simulator is not None else None

    @property
    def server(self) -> Any:
        """The simulator (the package's PythonInterface in the JVM), started on first use."""
        if self._simulator is None:
            t0 = time.perf_counter()
            self._simulator = start_simulator(self.java_options, self.server_path)
            self.timings["jvm_start"] = time.perf_counter() - t0
        return self._simulator.server

    def _fresh_server(self) -> Any:
        """The simulator for a new episode: a JVM that died since the last one is replaced."""
        if self._simulator is not None and not jvm_alive(self._simulator):
            with contextlib.suppress(Exception):  # frees the callback server; the gateway itself is gone
                stop_simulator(self._simulator)
            self._simulator = None
        return self.server

    def _jvm_died(self) -> AgentforgeError:
        return AgentforgeError(
            f"the ScienceWorld JVM exited during an episode of {self.task_name} (variation {self.variation}); "
            "reset the env to start a new JVM (env pools replay the episode), or raise the heap in "
            "env.java_options if it ran out of memory"
        )

    def _episode_server(self) -> Any:
        if self._simulator is None or not jvm_alive(self._simulator):
            raise self._jvm_died()
        return self._simulator.server

    def close(self) -> None:
        if self._simulator is not None:
            stop_simulator(self._simulator)
            self._simulator = None
        self.task_name = self.variation = None
        self.done = False

    # -- episodes -------------------------------------------------------------------------------------------------
    def task_variation(self, task: Task) -> tuple[str, int]:
        """The (task name, variation) a task plays (reads the package's variation split once per task)."""
        return pick_task(task, self.task_names, self.server)

    def task_key(self, task: Task) -> str:
        """The task's content (agentforge/envs/task_keys.py): the package's task and variation it plays. Needs the
        variation lists, which only the simulator gives: read once per process (`read_all_variations`), without
        touching this env's own JVM or episode."""
        if not variations_known(self.task_names):
            read_all_variations(self.java_options, self.server_path)
        name, variation = pick_task(task, self.task_names, None)
        return f"scienceworld:{name}:{variation}"

    def reset(self, task: Task) -> Observation:
        name, variation = pick_task(task, self.task_names, self._fresh_server())
        return self.reset_to(name, variation)

    def reset_to(self, task_name: str, variation: int) -> Observation:
        """Start an episode on a given task name and variation (tests, experts)."""
        server = self._fresh_server()
        t0 = time.perf_counter()
        try:
            server.load(task_name, int(variation), self.simplifications, False)
        except Exception as error:  # a JVM that died unnoticed (py4j error): start a new one, once
            if not type(error).__module__.startswith("py4j"):
                raise
            with contextlib.suppress(Exception):
                stop_simulator(self._simulator)
            self._simulator = None
            server = self._fresh_server()
            server.load(task_name, int(variation), self.simplifications, False)
        self.timings["load"] = time.perf_counter() - t0
        self.task_name, self.variation = task_name, int(variation)
        self.task_description = str(server.getTaskDescription())
        first = str(server.step("look around"))
        self.score = self.initial_score = self._read_score()
        self._paid = 0  # the start's free points are paid with the first step: rewards sum to the final score
        self.steps_taken = 0
        self.done = False
        return self._observation(first)

    def step(self, action: str) -> StepResult:
        if self.task_name is None:
            raise RuntimeError("the ScienceWorld env has no episode; call reset(task) first")
        if self.done:
            raise RuntimeError("this ScienceWorld episode is over (done=True); call reset() before stepping again")
        server = self._episode_server()
        command = _normalise(action) if isinstance(action, str) else ""
        t0 = time.perf_counter()
        ambiguous = False
        if command.lower() in BLOCKED_ACTIONS:
            text = f"'{command}' is not available here: each episode is one attempt at the task."
        else:
            try:
                text = str(server.step(command))
                if text.startswith(AMBIGUOUS_PREFIX):
                    ambiguous = True
                    text = str(server.step("0"))
            except Exception as error:  # py4j's errors: the JVM can die between the liveness check and the call
                if type(error).__module__.startswith("py4j"):
                    raise self._jvm_died() from error
                raise
        self.timings["step"] = time.perf_counter() - t0
        invalid = command.lower() in BLOCKED_ACTIONS or text.strip().startswith(INVALID_MESSAGES)
        self.score = self._read_score()
        self.steps_taken += 1
        reward = (max(self.score, 0) - self._paid) / WIN_SCORE
        self._paid = max(self.score, 0)
        won = self.score >= WIN_SCORE
        failed = self.score < 0
        self.done = won or failed or bool(server.getCompleted()) or self.steps_taken >= self.max_steps
        info: dict[str, Any] = {
            "score": self.score,
            "task_name": self.task_name,
            "variation": self.variation,
            "simplifications": self.simplifications,
            "steps": self.steps_taken,
            "moves": int(server.getNumMoves()),
            "invalid_action": invalid,
            EXECUTABLE: not invalid,
            "ambiguous": ambiguous,
            "failed": failed,
            "initial_score": self.initial_score,
        }
        if invalid:
            info["message"] = text
        return StepResult(self._observation(text), reward, self.done, won, info)

    def gold_actions(self, task_name: str, variation: int) -> list[str]:
        """The package's gold action sequence for a task variation (ends the current episode: it loads the task)."""
        server = self.server
        server.load(task_name, int(variation), self.simplifications, True)
        self.task_name = self.variation = None
        return [str(a) for a in server.getGoldActionSequence()]

    # -- helpers --------------------------------------------------------------------------------------------------
    def _read_score(self) -> int:
        return int(round(100 * float(self.server.getScore())))

    def valid_actions(self) -> list[str]:
        """The simulator's valid action-object combinations for the current state (sorted, `reset task` removed)."""
        actions = {str(a) for a in self.server.getValidActionObjectCombinations()}
        return sorted(a for a in actions if a.lower() not in BLOCKED_ACTIONS)

    def anchor(self) -> str:
        server = self.server
        lines = [*str(server.freeActionLook()).splitlines(), *str(server.freeActionInventory()).splitlines()]
        return "\n".join(sorted(line.strip() for line in lines if line.strip())) + f"\nscore: {self.score}"

    def _observation(self, text: str) -> Observation:
        admissible = None
        if self.admissible:
            admissible = [] if self.done else self.valid_actions()
        return Observation(observation_text(self.task_description, text), self.anchor(), admissible)
