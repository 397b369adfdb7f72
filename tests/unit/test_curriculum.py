"""The difficulty curriculum (`trainer.curriculum`): which level each training task is played at, promotion by
training success, resume, the refusals before anything starts, and the env host building a task's env with its
options (reasoning-gym's own levels)."""

from __future__ import annotations

import pytest

from agentforge.commands.preflight import preflight
from agentforge.errors import ConfigError
from agentforge.hosting.pool import LocalEnvPool
from agentforge.schema.compose import compose_config
from agentforge.tasks import TaskSampler
from agentforge.training.curriculum import CurriculumSampler, CurriculumSettings, with_curriculum
from agentforge.types import Task


def sampler(schedule: str = "linear", total: int = 12, **extra: object) -> CurriculumSampler:
    settings = CurriculumSettings.from_config({"option": "difficulty", "levels": [0, 1, 2], "schedule": schedule,
                                               **extra})
    return CurriculumSampler(TaskSampler("reasoning_gym"), settings, total)


def test_linear_levels_follow_the_share_of_training_tasks_drawn_on_the_same_seeds() -> None:
    curriculum = sampler(total=12)  # 3 levels over 12 tasks: 4 each
    batches = [curriculum.sample(2) for _ in range(6)]
    assert [b[0].options for b in batches] == [(("difficulty", 0),)] * 2 + [(("difficulty", 1),)] * 2 + \
        [(("difficulty", 2),)] * 2
    assert [t.seed for b in batches for t in b] == [t.seed for t in TaskSampler("reasoning_gym").sample(12)]
    assert curriculum.sample(2)[0].options == (("difficulty", 2),)  # past the run's length: the last level
    assert curriculum.metrics() == {"train/curriculum_level": 2.0, "train/curriculum_value": 2.0}


def test_the_linear_clock_counts_tasks_handed_out_not_seeds_skipped_as_held_out() -> None:
    settings = CurriculumSettings.from_config({"option": "difficulty", "levels": [0, 1], "schedule": "linear"})
    every_third = TaskSampler("reasoning_gym", admit=lambda task: task.seed % 3 == 0)  # two of three seeds held out
    curriculum = CurriculumSampler(every_third, settings, total_tasks=4)
    first, second = curriculum.sample(2), curriculum.sample(2)
    assert [t.seed for t in first + second] == [0, 3, 6, 9] and every_third.position == 10
    assert [t.options for t in first + second] == [(("difficulty", 0),)] * 2 + [(("difficulty", 1),)] * 2
    resumed = CurriculumSampler(TaskSampler("reasoning_gym", admit=lambda task: task.seed % 3 == 0), settings, 4)
    resumed.load_state_dict(CurriculumSampler(every_third, settings, 4, handed=2).state_dict())
    assert resumed.handed == 2 and resumed.sample(1)[0].options == (("difficulty", 1),)


def test_success_promotes_after_a_window_at_or_above_the_bar_and_never_past_the_top() -> None:
    curriculum = sampler("success", promote_at=0.75, window=2)
    assert curriculum.sample(1)[0].options == (("difficulty", 0),)
    assert not curriculum.observe(1.0)  # one iteration is not a window
    assert not curriculum.observe(0.25)  # mean 0.625 < 0.75
    assert not curriculum.observe(1.0)  # the last two: (0.25 + 1) / 2 = 0.625
    assert curriculum.observe(1.0) and curriculum.level == 1  # (1 + 1) / 2
    assert curriculum.sample(1)[0].options == (("difficulty", 1),)
    assert not curriculum.observe(0.75)  # the window starts anew at each level
    assert curriculum.observe(0.75) and curriculum.level == 2
    assert not curriculum.observe(1.0) and not curriculum.observe(1.0) and curriculum.level == 2


def test_a_resumed_curriculum_continues_where_its_checkpoint_left_it() -> None:
    first = sampler("success", promote_at=0.5, window=1)
    first.sample(4)
    first.observe(1.0)
    state = first.state_dict()
    resumed = sampler("success", promote_at=0.5, window=1)
    resumed.load_state_dict(state)
    assert resumed.level == 1 and resumed.sample(2) == first.sample(2)
    plain = TaskSampler("reasoning_gym")
    plain.sample(8)  # a checkpoint of a run without a curriculum: the linear schedule picks up by tasks drawn
    late = sampler(total=12)
    late.load_state_dict(plain.state_dict())
    assert late.position == 8 and late.sample(1)[0].options == (("difficulty", 2),)


def test_task_keys_tell_levels_apart_and_held_out_keys_are_unchanged() -> None:
    assert Task("reasoning_gym", 5, "eval").key == "reasoning_gym:eval:5"
    assert Task("reasoning_gym", 5, options=(("difficulty", 2),)).key == "reasoning_gym:train:5:difficulty=2"
    assert "difficulty=2" in Task("reasoning_gym", 5, options=(("difficulty", 2),)).describe()


def test_off_by_default_and_refused_for_a_mix() -> None:
    inner = TaskSampler("sokoban")
    assert with_curriculum(inner, None, "sokoban", 10) is inner
    assert with_curriculum(inner, {"option": None, "levels": []}, "sokoban", 10) is inner
    with pytest.raises(ConfigError, match="env=mix"):
        with_curriculum(inner, {"option": "num_gen_steps", "levels": [2, 5]}, "mix", 10)
    with pytest.raises(ConfigError, match="at least two values"):
        CurriculumSettings.from_config({"option": "difficulty", "levels": [1]})


@pytest.mark.parametrize("overrides,message", [
    (["trainer.curriculum.levels=[0,99]"], "env.difficulty=99 \\(a level of the curriculum\\) is refused: .*valid"),
    (["trainer.curriculum.option=difficulty_level"], "does not take these options.*its options are: task, difficulty"),
    (["trainer.curriculum.levels=[0]"], "at least two values of env.difficulty"),
])
def test_bad_curricula_are_refused_before_anything_starts(overrides: list[str], message: str) -> None:
    pytest.importorskip("reasoning_gym")
    cfg = compose_config(["recipe=grpo_reasoning_gym_arithmetic", "command=train",
                          "trainer.curriculum.option=difficulty", "trainer.curriculum.levels=[0,1,2]", *overrides])
    with pytest.raises(ConfigError, match=message):
        preflight(cfg)


def test_the_env_host_builds_each_tasks_env_with_its_options() -> None:
    pytest.importorskip("reasoning_gym")
    from agentforge.envs.adapters.reasoning_gym import ReasoningGymEnv

    def question(difficulty: int, seed: int) -> str:
        return ReasoningGymEnv(difficulty=difficulty).reset(Task("reasoning_gym", seed)).text

    with LocalEnvPool("reasoning_gym", {"difficulty": 0}) as pool:
        hard = (("difficulty", 4),)
        shown = [o.text for o in pool.reset([Task("reasoning_gym", 7, options=hard), Task("reasoning_gym", 7)])]
        assert shown == [question(4, 7), question(0, 7)] and shown[0] != shown[1]
        again = [o.text for o in pool.reset([Task("reasoning_gym", 8), Task("reasoning_gym", 8, options=hard)])]
        assert again == [question(0, 8), question(4, 8)]  # each slot's env rebuilt for the options asked
        replayed = pool.replay([(Task("reasoning_gym", 7, options=hard), ["0"])])[0]
        assert replayed.observation.text.startswith(question(4, 7) + "\n\nYour answer '0'")  # the hard question
