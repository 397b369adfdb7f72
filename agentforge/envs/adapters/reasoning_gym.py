"""reasoning-gym tasks as text envs (`env=reasoning_gym env.task=basic_arithmetic env.difficulty=0`).

reasoning-gym is procedural and single-turn: `create_dataset(task, seed, size, **config)[i]` is a question with its
answer, `dataset.score_answer(answer, entry)` the verifier's score in [0, 1]. A task seed is the dataset's seed (one
entry per seed). Train and eval seeds differ, but their questions need not: easy levels repeat questions
(`basic_arithmetic` at difficulty 0: 776 distinct in 1000 seeds), so held-out content is kept out of training by
the held-out filter on `task_key` (question and answer; agentforge/tasks/held_out.py), not by the seeds. `difficulty`
sets every attribute of the task's curriculum to that level (reasoning-gym's own knobs; clipped per attribute at
its highest level, as `set_global_level` does); `config` sets dataset fields directly and wins over the level.

An episode is one answer (reward = the score, success = a score of at least `success_score`, 1.0: exactly right);
`max_attempts` > 1 lets a wrong answer be retried with the feedback "incorrect" (an adapter extension: the library
itself scores one answer). The expert answers with the dataset's own answer (`trainer.warm_start=expert`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, ClassVar

from agentforge.envs.adapters.common import bad_options, import_library, plain_kwargs, unknown_id
from agentforge.envs.base import ENVS, EXECUTABLE
from agentforge.errors import ConfigError
from agentforge.types import Observation, StepResult, Task

NAME = "reasoning_gym"
EXTRA = "reasoning-gym"


def _factory() -> Any:
    import_library("reasoning_gym", EXTRA, NAME)
    import reasoning_gym.factory as factory

    return factory


def dataset_config(task: str, difficulty: int | None, config: dict[str, Any]) -> dict[str, Any]:
    """The dataset's config fields for a difficulty level and explicit overrides; bad names listed."""
    factory = _factory()
    if task not in factory.DATASETS:
        raise unknown_id(NAME, "task", task, factory.DATASETS)
    config_class = factory.DATASETS[task][1]
    fields = [f.name for f in dataclasses.fields(config_class) if f.name not in ("seed", "size")]
    unknown = [k for k in config if k not in fields]
    if unknown:
        raise bad_options(NAME, f"reasoning-gym task {task!r}'s config", unknown, fields)
    out: dict[str, Any] = {}
    if difficulty is not None:
        if not factory.has_curriculum(task):
            raise ConfigError(f"env {NAME!r}: task {task!r} has no curriculum, so no difficulty levels; set "
                              f"difficulty=null and its fields through config ({', '.join(fields)})")
        curriculum = factory.create_curriculum(task)
        top = max(len(a.levels) for a in curriculum.attributes.values()) - 1
        if not 0 <= difficulty <= top:
            raise ConfigError(f"env {NAME!r}: difficulty={difficulty} for {task!r}; valid levels: 0..{top} "
                              f"(attributes: {', '.join(curriculum.attributes)})")
        curriculum.set_global_level(int(difficulty))
        generated = curriculum.generate_configuration()
        out = {f.name: getattr(generated, f.name) for f in dataclasses.fields(generated)
               if f.name not in ("seed", "size")}
    out.update(config)
    return out


def entry_for(task: str, seed: int, config: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(dataset, entry) for a seed: a one-entry dataset, so an entry depends on its seed alone."""
    factory = _factory()
    try:
        dataset = factory.create_dataset(task, seed=seed, size=1, **config)
    except (TypeError, ValueError, AssertionError) as error:
        raise ConfigError(f"env {NAME!r}: reasoning-gym refused task {task!r} with config {config}: {error}") from None
    return dataset, dataset[0]


@ENVS.register(NAME)
class ReasoningGymEnv:
    """One reasoning-gym question per episode, scored by the task's own verifier."""

    # the SFT warm start's expert (`envs.base.expert_for`): a path, so this module does not import it
    expert: ClassVar[str] = "agentforge.envs.adapters.reasoning_gym:expert_actions"

    option_help: ClassVar[dict[str, str]] = {
        "task": "the reasoning-gym dataset name (basic_arithmetic, chain_sum, leg_counting, spell_backward ...)",
        "difficulty": "the curriculum level set on every attribute (0: easiest; null: the dataset's defaults)",
        "config": "dataset config fields (e.g. {min_terms: 2, max_terms: 2}); they win over difficulty",
        "max_attempts": "answers per episode (1: reasoning-gym's single answer; more: retry after 'incorrect')",
        "success_score": "a score of at least this is a win (1.0: exactly right)",
    }

    def __init__(self, task: str = "basic_arithmetic", difficulty: int | None = 0,
                 config: dict[str, Any] | None = None, max_attempts: int = 1, success_score: float = 1.0) -> None:
        if max_attempts < 1:
            raise ConfigError(f"env {NAME!r}: max_attempts must be >= 1, got {max_attempts}")
        self.task_name = str(task)
        self.config = dataset_config(self.task_name, difficulty, plain_kwargs(config))
        self.max_attempts = int(max_attempts)
        self.success_score = float(success_score)
        self.done = True
        self.entry: dict[str, Any] | None = None

    @classmethod
    def check_options(cls, options: dict[str, Any], splits: Sequence[str]) -> None:
        env = cls(**options)
        env.reset(Task(NAME, 0))

    def reset(self, task: Task) -> Observation:
        self._dataset, self.entry = entry_for(self.task_name, task.seed, self.config)
        self.attempts = 0
        self.done = False
        question = str(self.entry["question"])
        self._question = question
        return Observation(text=question, anchor=question, admissible=None)

    def task_key(self, task: Task) -> str:
        """The task's content (agentforge/envs/task_keys.py): the question and the answer it is scored against, as
        the seed's one-entry dataset gives them (~0.02 ms at basic_arithmetic), whatever seed drew them."""
        _, entry = entry_for(self.task_name, task.seed, self.config)
        return f"{NAME}:{self.task_name}:" + json.dumps([str(entry["question"]), str(entry["answer"])],
                                                        ensure_ascii=False)

    def expert_answer(self) -> str:
        if self.entry is None:
            raise RuntimeError("the reasoning-gym env has no episode; call reset(task) first")
        return str(self.entry["answer"])

    def step(self, action: str) -> StepResult:
        if self.done or self.entry is None:
            raise RuntimeError("this reasoning-gym episode is over (done=True); call reset() before stepping again")
        score = float(self._dataset.score_answer(str(action), self.entry) or 0.0)
        self.attempts += 1
        won = score >= self.success_score
        self.done = won or self.attempts >= self.max_attempts
        text = "correct" if won else f"incorrect (attempt {self.attempts} of {self.max_attempts})"
        feedback = f"{self._question}\n\nYour answer {str(action)[:200]!r} is {text}."
        info = {EXECUTABLE: True, "score": score, "attempts": self.attempts}
        return StepResult(Observation(text=feedback, anchor=feedback, admissible=None), score, self.done, won, info)

    def close(self) -> None:
        self.entry = None


def expert_actions(task: Task, env_options: dict[str, Any] | None = None) -> list[str]:
    """The dataset's own answer for the task's seed: the warm start's expert (`trainer.warm_start=expert`)."""
    env = ReasoningGymEnv(**dict(env_options or {}))
    env.reset(task)
    return [env.expert_answer()]
