"""The code env (`env=code`): problems by seed and level, keyed by content, the expert through the real sandbox,
the prompt's `<python>` tags parsed with the code's lines intact, and clear observations for bad actions."""

from __future__ import annotations

import pytest

from agentforge.agent.parsing import parse_response
from agentforge.agent.prompts import prompt_for
from agentforge.envs import make_env
from agentforge.envs.base import expert_for
from agentforge.envs.code import LEVELS, parse_action, parse_number, problem_for
from agentforge.envs.code.env import CodeEnv
from agentforge.errors import ConfigError
from agentforge.tasks import SPLIT_SEED_BASE
from agentforge.training.sft import expert_response
from agentforge.types import Task


@pytest.fixture(scope="module")
def env() -> CodeEnv:
    return make_env("code", {"sandbox": {"cpu_seconds": 1, "wall_seconds": 3}})


def test_problems_are_deterministic_verifiable_and_keyed_by_content(env):
    for level in LEVELS:
        problems = [problem_for(seed, level) for seed in range(20)]
        assert problems == [problem_for(seed, level) for seed in range(20)]
        assert len({p.question for p in problems}) >= 15
        for problem in problems[:3]:  # each problem's own program computes its answer
            assert env.sandbox.run(problem.solution).stdout.strip() == str(problem.answer)
    task = Task("code", SPLIT_SEED_BASE["eval"] + 3, "eval")
    key = env.task_key(task)
    assert key == f"code:0:{problem_for(task.seed, 0).question}={problem_for(task.seed, 0).answer}"
    assert env.task_key(Task("code", task.seed, "eval")) == key
    assert make_env("code", {"level": 1}).task_key(task) != key


def test_the_expert_solves_through_the_sandbox_and_its_turns_parse_back(env):
    template = prompt_for("code")
    for level in LEVELS:
        options = {"level": level}
        task = Task("code", 7)
        actions = expert_for("code")(task, options)
        assert actions is not None and actions[0].startswith("python[") and actions[1].startswith("answer[")
        played = make_env("code", options)
        played.reset(task)
        for action in actions:
            text = expert_response(action, played.expert_thought(action), template.action_tag)
            parsed = parse_response(text, None, template.action_tag, template.require_think, template.keep_whitespace)
            assert parsed.valid and parsed.action == action, (text, parsed)
            result = played.step(action)
        assert result.done and result.won and result.reward == 1.0


def test_code_keeps_its_lines_and_indentation_and_its_output_is_the_observation(env):
    template = prompt_for("code")
    response = ("<think>Loop.</think><python>\n    total = 0\n    for i in range(4):\n        total += i\n"
                "    print('total', total)\n</python>")
    parsed = parse_response(response, None, template.action_tag, template.require_think, template.keep_whitespace)
    assert parsed.valid and "\n        total += i" in parsed.action
    env.reset(Task("code", 1))
    result = env.step(parsed.action)
    assert "stdout:\ntotal 6" in result.observation.text and not result.done and result.reward == 0.0
    assert result.info["sandbox_status"] == "ok" and "You have 3 turn(s) left." in result.observation.text
    # the other templates still collapse whitespace (search queries, moves)
    search = parse_response("<think>x</think><search>a\n  b</search>", None, "search|answer", True)
    assert search.action == "search[a b]"


def test_errors_and_limits_come_back_as_observations(env):
    env.reset(Task("code", 2))
    failed = env.step("python[print(undefined_name)]")
    assert "NameError: name 'undefined_name' is not defined" in failed.observation.text
    assert failed.info["sandbox_status"] == "error" and not failed.done
    looped = env.step("python[while True: pass]")
    assert "CPU time limit of 1 s exceeded" in looped.observation.text
    assert looped.info["sandbox_status"] == "cpu_limit"


def test_bad_actions_and_wrong_answers(env):
    env.reset(Task("code", 3))
    invalid = env.step("I think it is 5")
    assert invalid.info["invalid_action"] and not invalid.info["executable"]
    assert "Invalid action: write <python>code</python>" in invalid.observation.text and invalid.reward == 0.0
    assert parse_action("python[   ]") is None and parse_action("answer[]") is None
    wrong = env.step("answer[-1]")
    assert wrong.done and not wrong.won and wrong.reward == 0.0 and wrong.info["correct_answer"] != -1
    assert parse_number("12,345.") == 12345 and parse_number("42.0") == 42 and parse_number("about 7") is None
    short = make_env("code", {"max_turns": 1})
    short.reset(Task("code", 3))
    ended = short.step("python[print(1)]")
    assert ended.done and ended.info["truncated"] and not ended.won


def test_bad_options_name_the_problem_and_the_fix():
    with pytest.raises(ConfigError, match="level=5; valid levels: 0, 1, 2"):
        CodeEnv(level=5)
    with pytest.raises(ConfigError, match="max_turns must be an int >= 1"):
        CodeEnv(max_turns=0)
    with pytest.raises(ConfigError, match=r"env 'code': env.sandbox.memory_mb=1: must be a number >= 32"):
        CodeEnv(sandbox={"memory_mb": 1})
    with pytest.raises(ConfigError, match="unknown sandbox option.*memory.*valid"):
        CodeEnv(sandbox={"memory": 64})
    CodeEnv.check_options({"level": 1}, ["train"])  # builds the env and runs a snippet: passes here
