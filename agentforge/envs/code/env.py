"""`env=code`: tool-integrated reasoning with a Python tool in a sandbox (issue 53; ReTool / SkyRL's code envs).

Actions (the `code` prompt template has the model write `<python>…</python>` or `<answer>…</answer>`, which the
parser hands over as `python[…]` / `answer[…]`, whitespace kept): `python[<code>]` runs the code in the sandbox
(`agentforge.sandbox`: a fresh process in its own namespaces per call, with CPU, wall, memory, process, output and
disk limits) and shows its stdout, stderr and why it stopped; `answer[<number>]` ends the episode, reward 1 when the
number is the problem's answer. Anything else is an invalid no-op that costs a turn (`info["invalid_action"]`,
`info["executable"]` False) with an observation saying what to write. The episode ends unpaid after `max_turns`.

Deterministic given the task and the actions when the code is (the snippet's hash seed is pinned; code that reads
the clock or unseeded randomness is not), so replay works for the code the expert and most models write.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from typing import Any, ClassVar

from agentforge.envs.base import ENVS, EXECUTABLE, echo
from agentforge.envs.code.tasks import LEVELS, Problem, problem_for
from agentforge.errors import ConfigError
from agentforge.sandbox import Sandbox, SandboxLimits
from agentforge.types import Observation, StepResult, Task

NAME = "code"
_ACTION = re.compile(r"^\s*(python|answer)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
ACTION_HELP = "write <python>code</python> to run Python (print what you need) or <answer>number</answer> to answer"
_NUMBER = re.compile(r"^[+-]?\d+(\.0*)?$")


def parse_action(action: str) -> tuple[str, str] | None:
    """`python[code]` → ("python", dedented code), `answer[x]` → ("answer", "x"); None for anything else."""
    match = _ACTION.match(action) if isinstance(action, str) else None
    if match is None:
        return None
    kind, body = match.group(1).casefold(), match.group(2)
    if kind == "python":
        body = textwrap.dedent(body.strip("\r\n")).strip()
        return (kind, body) if body else None
    return (kind, body.strip()) if body.strip() else None


def parse_number(text: str) -> int | None:
    """An answer as an integer: commas, underscores, spaces and a final period ignored ("12,345." → 12345)."""
    cleaned = re.sub(r"[\s,_]", "", text).rstrip(".")
    return int(float(cleaned)) if _NUMBER.match(cleaned) else None


@ENVS.register(NAME)
class CodeEnv:
    """Answer a math problem; run Python in the sandbox first. Rewards: 1 for the right number, else 0."""

    # the SFT warm start's expert (`envs.base.expert_for`): a path, so this module does not import it
    expert: ClassVar[str] = "agentforge.envs.code.expert:expert_actions"

    option_help: ClassVar[dict[str, str]] = {
        "level": "problem level: 0 big products, 1 modular powers and sums, 2 counting and prime sums",
        "max_turns": "actions (code runs and the answer) before the episode ends unpaid",
        "sandbox": "sandbox limits per call: cpu_seconds, wall_seconds, memory_mb, processes, output_bytes, disk_mb, "
                   "open_files, max_code_bytes, isolation (namespaces | rlimits_only); docs/code_tool.md",
    }

    def __init__(self, level: int = 0, max_turns: int = 4, sandbox: dict[str, Any] | None = None) -> None:
        if isinstance(level, bool) or level not in LEVELS:
            raise ConfigError(f"env {NAME!r}: level={level!r}; valid levels: {', '.join(map(str, LEVELS))}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigError(f"env {NAME!r}: max_turns must be an int >= 1 (e.g. 4), got {max_turns!r}")
        self.level = int(level)
        self.max_turns = max_turns
        try:
            limits = SandboxLimits.from_options(_plain(sandbox))
        except ConfigError as error:
            raise ConfigError(f"env {NAME!r}: env.{error}") from None
        self.sandbox = Sandbox(limits)
        self._problem: Problem | None = None
        self.turns_taken = 0
        self.done = True
        self.last_output = ""

    @classmethod
    def check_options(cls, options: dict[str, Any], splits: Sequence[str]) -> None:
        """Before a run starts: the options are valid and the sandbox really runs code on this machine."""
        env = cls(**options)
        result = env.sandbox.run("print(6 * 7)")
        if result.stdout.strip() != "42":
            raise ConfigError(f"env {NAME!r}: the sandbox did not run a test snippet ({result.status}: "
                              f"{result.observation()}); see docs/code_tool.md")

    # -- episode -------------------------------------------------------------------------------------------------
    def reset(self, task: Task) -> Observation:
        return self.reset_to_problem(problem_for(task.seed, self.level))

    def reset_to_problem(self, problem: Problem) -> Observation:
        """Start an episode on a given problem (tests, hand-made tasks)."""
        self._problem = problem
        self.turns_taken = 0
        self.done = False
        self.last_output = ""
        return self._observation(f"Question: {problem.question}\n{self._turns_left()}")

    def task_key(self, task: Task) -> str:
        """The task's content (agentforge/envs/task_keys.py): its level, question and answer, whatever seed drew
        them."""
        problem = problem_for(task.seed, self.level)
        return f"{NAME}:{self.level}:{problem.question}={problem.answer}"

    def step(self, action: str) -> StepResult:
        problem = self.problem
        if self.done:
            raise RuntimeError("this code episode is over (done=True); call reset() before stepping again")
        self.turns_taken += 1
        parsed = parse_action(action)
        info: dict[str, Any] = {"turns": self.turns_taken, "invalid_action": False, EXECUTABLE: True}
        reward, won = 0.0, False
        if parsed is None:
            info.update({"invalid_action": True, EXECUTABLE: False,
                         "error": f"{echo(repr(action))} is not an action; {ACTION_HELP}"})
            text = f"Question: {problem.question}\nInvalid action: {ACTION_HELP}."
        elif parsed[0] == "python":
            result = self.sandbox.run(parsed[1])
            self.last_output = result.observation()
            info.update(action="python", sandbox_status=result.status, sandbox_seconds=round(result.seconds, 4),
                        output_truncated=result.truncated)
            text = f"Question: {problem.question}\nYour code's output:\n{self.last_output}"
        else:
            number = parse_number(parsed[1])
            won = number == problem.answer
            reward = 1.0 if won else 0.0
            self.done = True
            info.update(action="answer", answer=parsed[1], correct_answer=problem.answer, task_score=reward,
                        answer_is_number=number is not None)
            text = f"Question: {problem.question}\nYour answer: {echo(parsed[1])}"
        if not self.done and self.turns_taken >= self.max_turns:
            self.done = True
            info.update(truncated=True, task_score=0.0)
        if not self.done:
            text += f"\n{self._turns_left()}"
        return StepResult(self._observation(text), reward, self.done, won, info)

    def expert_thought(self, action: str) -> str:
        """The warm start's thought before `action`: predictable from the prompt (compute, then read the output)."""
        parsed = parse_action(action)
        if parsed is not None and parsed[0] == "answer":
            return f"The code printed {parsed[1]}, so that is the answer."
        return "This is easier to compute exactly with Python; print the result."

    def close(self) -> None:
        self._problem = None

    @property
    def problem(self) -> Problem:
        if self._problem is None:
            raise RuntimeError("the code env has no episode; call reset(task) first")
        return self._problem

    def _turns_left(self) -> str:
        left = self.max_turns - self.turns_taken
        return f"You have {left} turn(s) left." + (" Answer now." if left == 1 else "")

    def _observation(self, text: str) -> Observation:
        anchor = f"{self.problem.question} || output: {self.last_output}" if self.last_output else self.problem.question
        return Observation(text=text, anchor=anchor, admissible=None)


def _plain(options: Any) -> dict[str, Any]:
    """A config section (an OmegaConf DictConfig or a dict) as a plain dict."""
    if options is None:
        return {}
    if hasattr(options, "items"):
        return {str(k): v for k, v in options.items()}
    raise ConfigError(f"env {NAME!r}: sandbox must be a mapping of limits (e.g. sandbox: {{cpu_seconds: 2}}), "
                      f"got {options!r}")
