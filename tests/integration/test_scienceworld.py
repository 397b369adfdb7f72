"""ScienceWorld on the real `scienceworld` package: gold paths win through the env, splits, JVM reuse, admissible
lists, bad actions, anchors and the prompt template. Needs the package and Java 17 (skipped without them)."""

from __future__ import annotations

import os
import shutil
import signal
import time

import pytest

pytest.importorskip("scienceworld")
if shutil.which("java") is None:
    pytest.skip("ScienceWorld needs a java executable", allow_module_level=True)

from agentforge.agent.prompts import HistoryEntry, prompt_for  # noqa: E402
from agentforge.envs.base import make_env  # noqa: E402
from agentforge.envs.scienceworld import ScienceWorldEnv, close_expert_envs, expert_actions  # noqa: E402
from agentforge.envs.scienceworld.tasks import PACKAGE_SPLIT, all_task_names, pick_task, split_variations  # noqa: E402
from agentforge.envs.scienceworld.text import split_task  # noqa: E402
from agentforge.errors import AgentforgeError, ConfigError  # noqa: E402
from agentforge.tasks import SPLIT_SEED_BASE  # noqa: E402
from agentforge.types import Observation, Task  # noqa: E402

pytestmark = pytest.mark.integration

SHORT_TASKS = ["find-non-living-thing", "lifespan-longest-lived", "power-component"]
OPTIONS = {"task_names": SHORT_TASKS, "max_steps": 30}


@pytest.fixture(scope="module")
def env():
    env = make_env("scienceworld", OPTIONS)
    yield env
    env.close()
    close_expert_envs()


def _jvm_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its parent counts as gone
            return stat.read().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gold_path_wins_with_rewards_summing_to_one(env, seed):
    task = Task("scienceworld", seed, "train")
    actions = expert_actions(task, OPTIONS)
    assert actions, f"no winning gold path for {task.describe()}"
    observation = env.reset(task)
    assert env.task_name == SHORT_TASKS[seed]  # consecutive seeds cycle through the tasks
    assert split_task(observation.text)[0] == " ".join(env.task_description.split())
    rewards, result = [], None
    for action in actions:
        result = env.step(action)
        rewards.append(result.reward)
        assert result.info["task_name"] == env.task_name and result.info["variation"] == env.variation
    assert result is not None and result.won and result.done
    assert result.info["score"] == 100 and not result.info["failed"]
    assert sum(rewards) == pytest.approx(1.0)
    assert all(0.0 <= r <= 1.0 for r in rewards)
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("look around")


def test_splits_follow_the_package_and_are_disjoint(env):
    names = all_task_names()
    assert len(names) == 30 and names[0] == "boil"
    for name in names:
        splits = split_variations(env.server, name)
        train, dev, test = (set(splits[s]) for s in ("train", "dev", "test"))
        assert train and dev and test, name
        assert not (train & dev or train & test or dev & test), name
    for split in ("train", "eval", "test"):
        base = SPLIT_SEED_BASE[split]
        for offset in (0, 4, 100):
            task = Task("scienceworld", base + offset, split)
            name, variation = pick_task(task, SHORT_TASKS, env.server)
            assert name == SHORT_TASKS[offset % len(SHORT_TASKS)]
            assert variation in split_variations(env.server, name)[PACKAGE_SPLIT[split]]
            assert pick_task(task, SHORT_TASKS, env.server) == (name, variation)  # deterministic
    seen = {pick_task(Task("scienceworld", s, "train"), SHORT_TASKS, env.server) for s in range(12)}
    assert len(seen) == 12  # different seeds, different (task, variation)


def test_env_reuses_its_jvm_across_episodes_and_close_stops_it():
    env = ScienceWorldEnv(**OPTIONS)
    assert not env.started and env.jvm_pid is None  # lazy: no JVM before the first reset
    env.reset(Task("scienceworld", 0))
    pid, started_in = env.jvm_pid, env.timings["jvm_start"]
    t0 = time.perf_counter()
    env.reset(Task("scienceworld", 1))
    env.step("look around")
    env.reset(Task("scienceworld", 0))
    assert time.perf_counter() - t0 < 30
    assert env.jvm_pid == pid and env.timings["jvm_start"] == started_in
    assert _jvm_running(pid)
    env.close()
    _wait_gone(pid)


def test_a_dead_jvm_fails_the_step_and_the_next_reset_replaces_it():
    env = ScienceWorldEnv(**OPTIONS)
    try:
        first = env.reset(Task("scienceworld", 0))
        pid = env.jvm_pid
        os.kill(pid, signal.SIGKILL)  # the JVM this test started
        _wait_gone(pid)
        with pytest.raises(AgentforgeError, match="JVM exited during an episode"):
            env.step("look around")
        again = env.reset(Task("scienceworld", 0))
        assert env.jvm_pid != pid and (again.text, again.anchor) == (first.text, first.anchor)
    finally:
        env.close()


def _wait_gone(pid: int) -> None:
    deadline = time.time() + 10
    while _jvm_running(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not _jvm_running(pid)


@pytest.fixture(scope="module")
def listing():
    """A second env (its own JVM) that lists admissible actions."""
    env = ScienceWorldEnv(**{**OPTIONS, "admissible": True, "max_steps": 12})
    yield env
    env.close()


def _scores(env: ScienceWorldEnv, task_name: str, variation: int, actions: list[str]) -> list[tuple[int, str, str]]:
    env.reset_to(task_name, variation)
    out = []
    for action in actions:
        result = env.step(action)
        out.append((result.info["score"], result.observation.text, result.observation.anchor))
        if result.done:
            break
    return out


def test_same_actions_same_observations_in_any_jvm(env):
    """Without constant hash codes, the electrical task wins a step later on its second play in a fresh JVM."""
    gold = env.gold_actions("power-component", 0)
    fresh = ScienceWorldEnv(**OPTIONS)
    try:
        first_play = _scores(fresh, "power-component", 0, gold)
        assert _scores(fresh, "power-component", 0, gold) == first_play
    finally:
        fresh.close()
    assert _scores(env, "power-component", 0, gold) == first_play  # a JVM with another history
    assert first_play[-1][0] == 100


def test_admissible_list_on_and_off(env, listing):
    observation = env.reset(Task("scienceworld", 0))
    assert observation.admissible is None
    observation = listing.reset(Task("scienceworld", 0))
    assert isinstance(observation.admissible, list) and len(observation.admissible) > 20
    assert "look around" in observation.admissible and "reset task" not in observation.admissible
    assert observation.admissible == sorted(set(observation.admissible))
    # the same task in another JVM: same text and anchor
    assert (observation.text, observation.anchor) == (env.reset(Task("scienceworld", 0)).text,
                                                      env.reset(Task("scienceworld", 0)).anchor)
    for _ in range(listing.max_steps - 1):
        result = listing.step("look around")
        assert isinstance(result.observation.admissible, list) and result.observation.admissible
        assert not result.done
    result = listing.step("look around")
    assert result.done and not result.won  # max_steps
    assert result.observation.admissible == []


def test_bad_actions_are_reported_not_raised(env):
    env.reset(Task("scienceworld", 1))  # lifespan-longest-lived
    for action in ("fly to the moon", "", "reset task"):
        result = env.step(action)
        assert result.info["invalid_action"] and result.info["message"]
        assert result.info["message"] in result.observation.text
        assert not result.done and not result.won
    assert env.steps_taken == 3  # each one cost a step


def test_ambiguous_input_is_resolved_and_a_wrong_focus_fails(env):
    env.reset_to("lifespan-longest-lived", 3)
    result = env.step("look at door")  # three doors outside
    assert result.info["ambiguous"] and "Ambiguous" not in result.observation.text
    assert result.info["score"] >= 0
    result = env.step("focus on air")
    assert result.done and not result.won and result.info["failed"] and result.info["score"] < 0
    assert result.reward <= 0


def test_anchor_is_the_state_not_the_printout(env):
    first = env.reset_to("find-non-living-thing", 2)
    looked = env.step("look around").observation
    assert looked.anchor == first.anchor
    elsewhere = "outside" if "called the kitchen" in first.text else "kitchen"
    moved = env.step(f"teleport to {elsewhere}").observation
    assert f"teleport to the {elsewhere}" in moved.text
    assert moved.anchor != first.anchor and hash(moved.anchor) is not None


def test_template_shows_the_task_once():
    template = prompt_for("scienceworld")
    env_text = "Task: Your task is to boil water.\n\nThis room is called the kitchen."
    old_text = "Task: Your task is to boil water.\n\nThis room is called the hallway."
    messages = template.messages(Observation(env_text, "a"), [HistoryEntry(old_text, "teleport to kitchen")], 2)
    user = messages[-1]["content"]
    assert user.startswith("Your task: Your task is to boil water.")
    assert user.count("boil water") == 1
    assert "This room is called the hallway." in user and "This room is called the kitchen." in user
    assert "focus on OBJ" in messages[0]["content"]


def test_bad_options_fail_before_a_jvm_starts():
    with pytest.raises(ConfigError, match="unknown ScienceWorld task"):
        ScienceWorldEnv(task_names=["boil-the-ocean"])
    with pytest.raises(ConfigError, match="simplification"):
        ScienceWorldEnv(simplifications="superEasy")
    with pytest.raises(ConfigError, match="max_steps"):
        ScienceWorldEnv(max_steps=0)
    assert ScienceWorldEnv(task_names=["task-1-boil"], simplifications=["openDoors", "teleportAction"]).task_names == (
        "boil",
    )
