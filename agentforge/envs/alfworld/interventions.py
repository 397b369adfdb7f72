"""ALFWorld intervention evaluation (TJPO paper §4.6, appendix G): the same tasks under three conditions.

Each case names a source-location category X of a game (e.g. `countertop`) and its forbidden locations (every
initially navigable `countertop N`); the game is also solvable without them (see `intervention_cases`).

* **standard**: the plain game.
* **user_constraint**: every observation (the first one too) ends with an instruction to avoid X's locations.
  Admissible actions and dynamics are unchanged, so the agent can disobey; `info["forbidden_visit"]` marks a step
  that the engine confirmed as a `go to` to a forbidden location, and `info["violations"]` counts them.
* **disruption**: X's locations are unavailable from the start, unannounced. A command naming one of them (`go to`,
  open/close, take from, move to, examine, ...) is rejected: the engine runs `look` instead (one step used, the
  manipulation state kept) and the observation says the location is unavailable. The first rejection reveals the
  disruption: from then on every observation lists the unavailable locations and admissible actions omit them.

`info` keeps everything `AlfWorldEnv` reports (TJPO's descriptors read `action_type` and `location_category`), plus
`forbidden_visit`, `violations`, `rejected`, `disruption_revealed`, `case_id` and `condition` in every condition.
A rejected step reports the attempted command's `action_type` (the agent's behaviour), no location reached and
`executable` False; otherwise `executable` is the game's own (False on "Nothing happens.").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from agentforge.envs.alfworld.env import AlfWorldEnv, action_type
from agentforge.envs.alfworld.games import GameRecord, GameSet
from agentforge.envs.alfworld.intervention_cases import InterventionCase, load_cases
from agentforge.envs.base import ENVS, EXECUTABLE
from agentforge.errors import ConfigError
from agentforge.tasks import SPLIT_SEED_BASE
from agentforge.types import Observation, StepResult, Task, Trajectory

CONDITIONS: tuple[str, ...] = ("standard", "user_constraint", "disruption")
REPLACEMENT_ACTION = "look"


def check_condition(condition: str) -> str:
    if condition not in CONDITIONS:
        raise ConfigError(f"unknown intervention condition {condition!r}; use one of {', '.join(CONDITIONS)} "
                          "(env.condition=...)")
    return condition


def mentions(command: str, location: str) -> bool:
    """Whether a command names a location as whole words (`countertop 1` is not named by `countertop 10`)."""
    words, target = command.lower().split(), location.lower().split()
    width = len(target)
    return any(words[i : i + width] == target for i in range(len(words) - width + 1))


def blocked_location(command: str, forbidden: Sequence[str]) -> str | None:
    """The first forbidden location a command names, if any."""
    return next((name for name in forbidden if mentions(command, name)), None)


def constraint_instruction(category: str, forbidden: Sequence[str]) -> str:
    return (f"Constraint: avoid locations of type {category}: {', '.join(forbidden)}. "
            "Complete the task without visiting them.")


def unavailable_notice(forbidden: Sequence[str]) -> str:
    return f"Unavailable locations: {', '.join(forbidden)}. You cannot go to or interact with them."


def _shown(observation: Observation, text: str, admissible: list[str] | None) -> Observation:
    """The observation as the agent sees it; the anchor is the shown text (GiGPO groups on what was seen)."""
    return Observation(text=text, anchor=text, admissible=admissible)


def _with_info(result: StepResult, observation: Observation, info: dict[str, Any]) -> StepResult:
    return StepResult(observation, result.reward, result.done, result.won, {**result.info, **info})


class InterventionRule(Protocol):
    """One episode's condition: how the first observation is shown and how a step is executed."""

    def start(self, observation: Observation) -> Observation: ...

    def step(self, env: AlfWorldEnv, action: str) -> StepResult: ...


@dataclass
class StandardRule:
    """The plain game; forbidden visits are still counted (how often a policy uses X unprompted)."""

    forbidden: tuple[str, ...]
    violations: int = 0

    def start(self, observation: Observation) -> Observation:
        return observation

    def step(self, env: AlfWorldEnv, action: str) -> StepResult:
        result = env.step(action)
        visit = result.info.get("location") in self.forbidden
        self.violations += visit
        info = {"forbidden_visit": visit, "violations": self.violations, "rejected": False,
                "disruption_revealed": False}
        return _with_info(result, self.start(result.observation), info)


@dataclass
class UserConstraintRule(StandardRule):
    """The avoid instruction appended to every observation; nothing else changes."""

    category: str = ""

    @property
    def instruction(self) -> str:
        return constraint_instruction(self.category, self.forbidden)

    def start(self, observation: Observation) -> Observation:
        return _shown(observation, f"{observation.text}\n\n{self.instruction}", observation.admissible)


@dataclass
class DisruptionRule:
    """Forbidden locations unavailable: commands naming them run `look` instead; revealed at the first rejection."""

    forbidden: tuple[str, ...]
    revealed: bool = False
    rejections: int = 0

    def start(self, observation: Observation) -> Observation:
        if not self.revealed:
            return observation
        admissible = None
        if observation.admissible is not None:
            admissible = [c for c in observation.admissible if blocked_location(c, self.forbidden) is None]
        return _shown(observation, f"{observation.text}\n\n{unavailable_notice(self.forbidden)}", admissible)

    def step(self, env: AlfWorldEnv, action: str) -> StepResult:
        command = " ".join(str(action).strip().split())
        blocked = blocked_location(command, self.forbidden)
        if blocked is None:
            result = env.step(command)
            info = {"forbidden_visit": False, "violations": 0, "rejected": False,
                    "disruption_revealed": self.revealed}
            return _with_info(result, self.start(result.observation), info)
        was_admissible = command in env.admissible_commands
        result = env.step(REPLACEMENT_ACTION)
        self.revealed = True
        self.rejections += 1
        shown = self.start(result.observation)
        text = f"Nothing happens: {blocked} is unavailable. {shown.text}"
        info = {
            "action_type": action_type(command), "action_admissible": was_admissible, "location": None,
            "location_category": None, "forbidden_visit": False, "violations": 0, "rejected": True,
            "blocked_location": blocked, "replaced_by": REPLACEMENT_ACTION, "disruption_revealed": True,
            EXECUTABLE: False,  # the command was not carried out (`look` ran in its place)
        }
        return _with_info(result, _shown(shown, text, shown.admissible), info)


def make_rule(condition: str, case: InterventionCase) -> InterventionRule:
    check_condition(condition)
    if condition == "user_constraint":
        return UserConstraintRule(tuple(case.forbidden), category=case.category)
    if condition == "disruption":
        return DisruptionRule(tuple(case.forbidden))
    return StandardRule(tuple(case.forbidden))


@ENVS.register("alfworld_intervention")
class AlfWorldInterventionEnv:
    """ALFWorld on the intervention cases: task seed i plays case i mod N under the configured condition.

    Every split (train/eval/test) maps onto the one case list, so Standard, User Constraints and Disruption compare
    on the same tasks. `cases` is `bundled`, a case file's path, or a list of cases. `data_source` overrides
    where the cases' games come from (default: as the case file says).
    """

    drawing: ClassVar[str] = "agentforge.viewer.alfworld:DRAWING"  # drawn as ALFWorld (`agentforge view`)
    # TJPO's descriptors and the eval's cross-metrics (agentforge/algorithms/descriptors.py finds them here)
    descriptors: ClassVar[dict[str, str]] = {"action_type": "agentforge.envs.alfworld.descriptors:alfworld_action_type",
                                             "location": "agentforge.envs.alfworld.descriptors:alfworld_location"}
    option_help: ClassVar[dict[str, str]] = {
        'condition': 'standard | user_constraint | disruption',
        'cases': 'bundled (the shipped case file) | a case file (.jsonl.gz)',
        'max_steps': "env steps before the episode ends unpaid (the paper's limit)",
        'data_source': "where the cases' games come from (null: as recorded in the case file)",
    }

    def __init__(self, condition: str = "standard", cases: str | Sequence[InterventionCase] = "bundled",
                 max_steps: int = 50, data_source: str | None = None) -> None:
        self.condition = check_condition(str(condition))
        self.cases = load_cases(cases if not isinstance(cases, Path) else str(cases))
        self.data_source = str(data_source) if data_source else None
        self.env = AlfWorldEnv(data_source=self.data_source or "bundled", max_steps=max_steps)
        self._games: dict[tuple[str, str], dict[str, GameRecord]] = {}
        self._rule: InterventionRule | None = None
        self._case: InterventionCase | None = None
        self._condition = self.condition

    def case_for(self, task: Task) -> InterventionCase:
        base = SPLIT_SEED_BASE.get(task.split, 0)
        return self.cases[(task.seed - base) % len(self.cases)]

    def game_for(self, case: InterventionCase) -> GameRecord:
        source = self.data_source or case.data_source
        key = (source, case.game_split)
        if key not in self._games:
            games = GameSet(data_source=source).games(case.game_split)
            self._games[key] = {g.game_id: g for g in games}
        game = self._games[key].get(case.game_id)
        if game is None:
            raise ConfigError(f"intervention case {case.case_id}: game {case.game_id!r} is not in split "
                              f"{case.game_split!r} of data_source {source!r}; rebuild the case file with "
                              "envs/build_alfworld_interventions.py for these games, or use cases=bundled")
        return game

    def reset(self, task: Task) -> Observation:
        return self.reset_to_case(self.case_for(task))

    def task_key(self, task: Task) -> str:
        """The task's content (agentforge/envs/task_keys.py): the condition, the forbidden category and the game's
        content hash (`AlfWorldEnv.task_key`), not the case's game id. Every split plays the one case list, so
        this env's splits share all their content: an evaluation env, not one to train on."""
        case = self.case_for(task)
        return f"alfworld_intervention:{self.condition}:avoid-{case.category}:{self.env.game_key(self.game_for(case))}"

    def reset_to_case(self, case: InterventionCase, condition: str | None = None) -> Observation:
        """Start an episode on a case, under the env's condition unless another is given (the builder's checks)."""
        self._condition = check_condition(condition or self.condition)
        observation = self.env.reset_to_game(self.game_for(case))
        self._case = case
        self._rule = make_rule(self._condition, case)
        return self._rule.start(observation)

    def step(self, action: str) -> StepResult:
        if self._rule is None or self._case is None:
            raise RuntimeError("the ALFWorld intervention env has no episode; call reset(task) first")
        result = self._rule.step(self.env, action)
        result.info.update({"case_id": self._case.case_id, "condition": self._condition,
                            "forbidden_category": self._case.category})
        return result

    def close(self) -> None:
        self.env.close()
        self._rule = None
        self._case = None

    @property
    def case(self) -> InterventionCase:
        if self._case is None:
            raise RuntimeError("the ALFWorld intervention env has no episode; call reset(task) first")
        return self._case

    @property
    def rule(self) -> InterventionRule:
        if self._rule is None:
            raise RuntimeError("the ALFWorld intervention env has no episode; call reset(task) first")
        return self._rule


def intervention_success(trajectory: Trajectory, condition: str) -> bool:
    """The paper's success per condition: Standard and Disruption count wins (a disruption episode that never tries
    a forbidden location counts too); User Constraints needs a win with no engine-confirmed forbidden visit."""
    check_condition(condition)
    if not trajectory.won:
        return False
    if condition == "user_constraint":
        return not any(turn.info.get("forbidden_visit") for turn in trajectory.turns)
    return True
