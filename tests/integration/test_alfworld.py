"""ALFWorld on the real engine (alfworld==0.4.2 + textworld[pddl]): bundled games of every task type are won by
their planner walkthroughs, a hand-written game folder in the real format loads, admissible lists, the step
limit, info fields, replay determinism, the generator, per-type success and the prompt. Skipped without the engine
(scripts/install_alfworld.sh installs it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("textworld")
pytest.importorskip("alfworld")

from agentforge.agent.prompts import HistoryEntry, prompt_for  # noqa: E402
from agentforge.envs.alfworld import COLUMNS, AlfWorldEnv, action_type, location_category  # noqa: E402
from agentforge.envs.alfworld.expert import expert_actions  # noqa: E402
from agentforge.envs.alfworld.games import (  # noqa: E402
    ALFWORLD_SPLITS,
    GameSet,
    bundle_path,
    fill_task,
    load_bundle,
    package_logic,
)
from agentforge.envs.alfworld.generator import game_spec, solve_with_limit, write_game_folder  # noqa: E402
from agentforge.envs.alfworld.scenes import UNSEEN_FLOOR_PLANS  # noqa: E402
from agentforge.envs.alfworld.success import success_by_task_type  # noqa: E402
from agentforge.envs.alfworld.task_types import TASK_TYPES  # noqa: E402
from agentforge.envs.base import make_env  # noqa: E402
from agentforge.errors import ConfigError  # noqa: E402
from agentforge.tasks import SPLIT_SEED_BASE  # noqa: E402
from agentforge.types import Task, Trajectory, Turn  # noqa: E402

pytestmark = pytest.mark.integration

# A kitchen written by hand from the format alone: a countertop with an apple, a closed fridge, a sink basin.
HANDWRITTEN_PROBLEM = """
(define (problem plan_handwritten)
(:domain alfred)
(:objects
agent1 - agent
AppleType - otype
KnifeType - otype
ButterKnifeType - otype
CounterTopType - rtype
FridgeType - rtype
SinkBasinType - rtype
MicrowaveType - rtype
Apple_bar__plus_00_dot_10_bar__plus_00_dot_95_bar__minus_01_dot_00 - object
CounterTop_bar__plus_00_dot_00_bar__plus_00_dot_90_bar__minus_01_dot_00 - receptacle
Fridge_bar__minus_02_dot_00_bar__plus_00_dot_00_bar__plus_01_dot_00 - receptacle
Sink_bar__plus_01_dot_00_bar__plus_00_dot_90_bar__minus_01_dot_00_bar_SinkBasin - receptacle
loc_bar_0_bar__minus_3_bar_2_bar_30 - location
loc_bar__minus_7_bar_4_bar_3_bar_0 - location
loc_bar_4_bar__minus_3_bar_2_bar_30 - location
loc_bar_1_bar_1_bar_0_bar_0 - location
)
(:init
(receptacleType CounterTop_bar__plus_00_dot_00_bar__plus_00_dot_90_bar__minus_01_dot_00 CounterTopType)
(receptacleType Fridge_bar__minus_02_dot_00_bar__plus_00_dot_00_bar__plus_01_dot_00 FridgeType)
(receptacleType Sink_bar__plus_01_dot_00_bar__plus_00_dot_90_bar__minus_01_dot_00_bar_SinkBasin SinkBasinType)
(objectType Apple_bar__plus_00_dot_10_bar__plus_00_dot_95_bar__minus_01_dot_00 AppleType)
(canContain CounterTopType AppleType)
(canContain FridgeType AppleType)
(canContain SinkBasinType AppleType)
(pickupable Apple_bar__plus_00_dot_10_bar__plus_00_dot_95_bar__minus_01_dot_00)
(openable Fridge_bar__minus_02_dot_00_bar__plus_00_dot_00_bar__plus_01_dot_00)
(cleanable Apple_bar__plus_00_dot_10_bar__plus_00_dot_95_bar__minus_01_dot_00)
(coolable Apple_bar__plus_00_dot_10_bar__plus_00_dot_95_bar__minus_01_dot_00)
(atLocation agent1 loc_bar_1_bar_1_bar_0_bar_0)
(inReceptacle Apple_bar__plus_00_dot_10_bar__plus_00_dot_95_bar__minus_01_dot_00 CounterTop_bar__plus_00_dot_00_bar__plus_00_dot_90_bar__minus_01_dot_00)
(receptacleAtLocation CounterTop_bar__plus_00_dot_00_bar__plus_00_dot_90_bar__minus_01_dot_00 loc_bar_0_bar__minus_3_bar_2_bar_30)
(receptacleAtLocation Fridge_bar__minus_02_dot_00_bar__plus_00_dot_00_bar__plus_01_dot_00 loc_bar__minus_7_bar_4_bar_3_bar_0)
(receptacleAtLocation Sink_bar__plus_01_dot_00_bar__plus_00_dot_90_bar__minus_01_dot_00_bar_SinkBasin loc_bar_4_bar__minus_3_bar_2_bar_30)
(objectAtLocation Apple_bar__plus_00_dot_10_bar__plus_00_dot_95_bar__minus_01_dot_00 loc_bar_0_bar__minus_3_bar_2_bar_30)
)
(:goal (exists (?r - receptacle) (exists (?o - object) (and (cleanable ?o) (objectType ?o AppleType)
    (receptacleType ?r FridgeType) (isClean ?o) (inReceptacle ?o ?r)))))
)
"""  # noqa: E501
HANDWRITTEN_PLAN = ["go to countertop 1", "take apple 1 from countertop 1", "go to sinkbasin 1",
                    "clean apple 1 with sinkbasin 1", "go to fridge 1", "open fridge 1", "move apple 1 to fridge 1"]


@pytest.fixture(scope="module")
def env():
    env = make_env("alfworld", {"data_source": "bundled", "max_steps": 50})
    yield env
    env.close()


@pytest.fixture(scope="module")
def handwritten_root(tmp_path_factory) -> Path:
    """A data folder with one game in the real format, written without agentforge's generator."""
    root = tmp_path_factory.mktemp("alfworld_data")
    game_dir = root / "train" / "pick_clean_then_place_in_recep-Apple-None-Fridge-1" / "trial_T0001"
    game_dir.mkdir(parents=True)
    params = {"object_target": "Apple", "parent_target": "Fridge", "toggle_target": "", "mrecep_target": "",
              "object_sliced": False}
    (game_dir / "traj_data.json").write_text(json.dumps({"task_type": "pick_clean_then_place_in_recep",
                                                         "pddl_params": params}))
    domain, grammar = package_logic()
    game = {"pddl_domain": domain, "grammar": fill_task(grammar, "put a clean apple in fridge"),
            "pddl_problem": HANDWRITTEN_PROBLEM, "solvable": True}
    (game_dir / "game.tw-pddl").write_text(json.dumps(game))
    return root


def _first_game_of_each_type(split: str) -> dict[str, int]:
    games = GameSet().games(split)
    firsts: dict[str, int] = {}
    for index, game in enumerate(games):
        firsts.setdefault(game.task_type, index)
    return firsts


# -- the bundled set --------------------------------------------------------------------------------------------------
def test_bundle_has_every_task_type_and_keeps_unseen_scenes_apart():
    scenes = {}
    for split in ALFWORLD_SPLITS:
        games = load_bundle(str(bundle_path(split)), split)
        assert len(games) >= (120 if split == "train" else 30)
        assert {g.task_type for g in games} == {t.name for t in TASK_TYPES}
        assert all(g.walkthrough and g.pddl_problem and g.task_desc for g in games)
        assert len({g.game_id for g in games}) == len(games)
        scenes[split] = {g.floor_plan for g in games}
    assert scenes["valid_unseen"] <= set(UNSEEN_FLOOR_PLANS)
    assert not (scenes["train"] | scenes["valid_seen"]) & set(UNSEEN_FLOOR_PLANS)


def test_bundled_games_are_what_the_generator_makes():
    """The shipped problems are reproducible from the seed: regenerate two and compare the text."""
    games = load_bundle(str(bundle_path("train")), "train")
    for game in games[:2]:
        trial = game.game_id.rsplit("/", 1)[1]  # trial_G<index>_<attempt>
        index, attempt = (int(part) for part in trial[len("trial_G"):].split("_"))
        spec = game_spec(0, "train", index, attempt)
        assert spec.rel_dir == game.game_id
        assert spec.pddl_problem == game.pddl_problem and spec.task_desc == game.task_desc


@pytest.mark.parametrize("task_type", [t.name for t in TASK_TYPES])
def test_every_task_type_walkthrough_wins(env, task_type):
    split = "valid_seen"
    index = _first_game_of_each_type(split)[task_type]
    task = Task("alfworld", SPLIT_SEED_BASE["eval"] + index, "eval")
    obs = env.reset(task)
    assert env.game.task_type == task_type and env.game.split == split
    assert obs.text.startswith("-= Welcome to TextWorld, ALFRED! =-") and "Your task is to: " in obs.text
    assert obs.anchor == obs.text and "help" not in obs.admissible and "look" in obs.admissible
    actions = expert_actions(task, {"data_source": "bundled"})
    assert actions == list(env.game.walkthrough)
    reached = []
    for i, action in enumerate(actions):
        assert action in obs.admissible
        result = env.step(action)
        info = result.info
        assert info["task_type"] == {t.name: t.short for t in TASK_TYPES}[task_type]
        assert info["action_type"] == action_type(action) and info["steps"] == i + 1
        if action.startswith("go to "):
            reached.append(action[len("go to "):])
            assert info["location"] == reached[-1] == info["current_location"]
            assert info["location_category"] == location_category(reached[-1])
        else:
            assert info["location"] is None
        assert info["visited_locations"] == list(dict.fromkeys(reached))
        obs = result.observation
        last = i == len(actions) - 1
        assert result.done == result.won == last and result.reward == (1.0 if last else 0.0)
    with pytest.raises(RuntimeError, match="over"):
        env.step("look")


# -- a game folder the generator did not write ------------------------------------------------------------------------
def test_env_loads_a_handwritten_game_folder(handwritten_root):
    env = AlfWorldEnv(data_source=str(handwritten_root))
    try:
        task = Task("alfworld", 0, "train")
        obs = env.reset(task)
        assert "a countertop 1, a fridge 1, and a sinkbasin 1" in obs.text
        assert obs.text.rstrip().endswith("Your task is to: put a clean apple in fridge.")
        assert sorted(obs.admissible) == ["go to countertop 1", "go to fridge 1", "go to sinkbasin 1", "inventory",
                                          "look"]
        assert "help" in env.admissible_commands
        texts = []
        for action in HANDWRITTEN_PLAN:
            result = env.step(action)
            texts.append(result.observation.text)
        assert result.won and result.done and result.reward == 1.0
        assert texts[0] == "You arrive at countertop 1. On the countertop 1, you see a apple 1."
        assert texts[4] == "You arrive at fridge 1. The fridge 1 is closed."
        assert result.info["task_type"] == "Clean"
        assert result.info["visited_locations"] == ["countertop 1", "sinkbasin 1", "fridge 1"]
        # replay: same game, same actions, same texts
        env.reset(task)
        assert [env.step(a).observation.text for a in HANDWRITTEN_PLAN] == texts
        # no stored walkthrough: the package's planner expert plans this game
        plan = expert_actions(task, {"data_source": str(handwritten_root)})
        env.reset(task)
        results = [env.step(a) for a in plan]
        assert results[-1].won and len(plan) <= len(HANDWRITTEN_PLAN)
    finally:
        env.close()


def test_step_limit_ends_the_episode_unpaid(handwritten_root):
    env = AlfWorldEnv(data_source=str(handwritten_root), max_steps=50)
    try:
        env.reset(Task("alfworld", 0, "train"))
        for step in range(1, 51):
            result = env.step("look" if step % 2 else "inventory")
            assert result.done == (step == 50) and not result.won and result.reward == 0.0
        assert result.info["truncated"] and result.info["steps"] == 50
        with pytest.raises(RuntimeError):
            env.step("look")
        # an inadmissible command changes nothing and is reported
        obs = env.reset(Task("alfworld", 0, "train"))
        result = env.step("fly to the moon")
        assert result.observation.text == "Nothing happens." and not result.info["action_admissible"]
        assert result.observation.admissible == obs.admissible
    finally:
        env.close()


def test_data_source_errors_name_the_fix(monkeypatch, tmp_path):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(ConfigError, match="ALFWORLD_DATA"):
        AlfWorldEnv(data_source="real").reset(Task("alfworld", 0, "train"))
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    with pytest.raises(ConfigError, match="json_2.1.1"):
        AlfWorldEnv(data_source="real").reset(Task("alfworld", 0, "train"))
    with pytest.raises(ConfigError, match="task type"):
        AlfWorldEnv(task_types=["Fly"])
    with pytest.raises(ConfigError, match="eval_split"):
        AlfWorldEnv(eval_split="dev")


# -- generator --------------------------------------------------------------------------------------------------------
def test_generator_is_deterministic_and_its_game_is_planner_solved(tmp_path):
    spec = game_spec(7, "valid_unseen", 0, 0)
    assert spec == game_spec(7, "valid_unseen", 0, 0)
    assert spec.sampled.scene.floor_plan.number in UNSEEN_FLOOR_PLANS
    assert spec.traj_data["task_type"] == "pick_and_place_simple"
    folder = write_game_folder(tmp_path, spec)
    assert {p.name for p in folder.iterdir()} == {"traj_data.json", "initial_state.pddl", "game.tw-pddl"}
    walkthrough, reason = solve_with_limit(folder / "game.tw-pddl", 30)
    assert walkthrough, reason
    env = AlfWorldEnv(data_source=str(tmp_path))
    try:
        env.reset_to_game(folder)
        assert [env.step(a) for a in walkthrough][-1].won
    finally:
        env.close()


# -- per-type success and the prompt ----------------------------------------------------------------------------------
def test_success_by_task_type_fills_the_papers_columns():
    def trajectory(seed: int, won: bool, task_type: str | None) -> Trajectory:
        info = {"task_type": task_type} if task_type else {}
        turn = Turn(prompt_ids=[1], response_ids=[2], logprobs=[0.0], forced_mask=[False], response_text="",
                    action=None, valid=task_type is not None, reward=0.0, env_reward=0.0, anchor="", observation="",
                    info=info)
        return Trajectory(task=Task("alfworld", seed, "eval"), rollout_index=0, turns=[turn], won=won)

    firsts = _first_game_of_each_type("valid_seen")
    look = firsts["look_at_obj_in_light"] + SPLIT_SEED_BASE["eval"]
    rates = success_by_task_type([
        trajectory(0, True, "Pick"), trajectory(1, False, "Pick"), trajectory(2, True, "Heat"),
        trajectory(look, True, None),  # no env info: the type comes from the game the task plays
    ])
    assert rates == {"Pick": 0.5, "Look": 1.0, "Heat": 1.0, "All": 0.75}
    assert set(rates) <= set(COLUMNS)


def test_prompt_repeats_the_task_and_lists_admissible_actions(env):
    obs = env.reset(Task("alfworld", SPLIT_SEED_BASE["eval"], "eval"))
    template = prompt_for("alfworld")
    task_line = obs.text.split("Your task is to: ")[1].strip()
    later = env.step(obs.admissible[0]).observation
    history = [HistoryEntry(obs.text, obs.admissible[0])]
    for messages in (template.messages(obs, [], 1), template.messages(later, history, 2),
                     template.messages(later, [], 5, intro=obs.text)):
        user = messages[-1]["content"]
        assert f"Your task is to: {task_line}" in user and "Welcome to TextWorld" not in user
        assert "<think>" in user and "<action>" in user
    user = template.messages(later, history, 2)[-1]["content"]
    assert later.text in user and ", ".join(later.admissible) in user
