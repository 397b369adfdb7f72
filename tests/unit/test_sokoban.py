"""Sokoban env and expert solver: determinism, gym-sokoban's exact step semantics, solutions that win."""

from __future__ import annotations

import importlib.util
import random
import warnings
from typing import Any

import numpy as np
import pytest

from agentforge.envs import make_env
from agentforge.envs.sokoban import ACTIONS, LEGEND, SokobanEnv, parse_grid, render_grid, state_from_gym
from agentforge.envs.sokoban_solver import expert_actions, solve
from agentforge.errors import ConfigError
from agentforge.types import Task

pytestmark = pytest.mark.unit


def task(seed: int) -> Task:
    return Task(env="sokoban", seed=seed)


# -- generation -----------------------------------------------------------------------------------------------------
def test_same_seed_same_room_and_different_seeds_differ() -> None:
    a, b = SokobanEnv(), SokobanEnv()
    rooms = []
    for seed in range(20):
        obs_a, obs_b = a.reset(task(seed)), b.reset(task(seed))
        assert obs_a.anchor == obs_b.anchor
        assert a.reset(task(seed)).anchor == obs_a.anchor  # also on a reused env
        rooms.append(obs_a.anchor)
    assert len(set(rooms)) >= 15


def test_group_envs_sharing_a_seed_play_identically() -> None:
    group = [make_env("sokoban", {"dim_room": [6, 6], "num_boxes": 2, "max_steps": 30}) for _ in range(4)]
    first = {env.reset(task(7)).anchor for env in group}
    assert len(first) == 1
    rng = random.Random(0)
    for _ in range(30):
        action = rng.choice(ACTIONS)
        results = [env.step(action) for env in group]
        assert len({(r.observation.anchor, r.reward, r.done, r.won, r.info["player_pos"]) for r in results}) == 1
        if results[0].done:
            break


def test_generation_leaves_the_global_rngs_alone() -> None:
    random.seed(1234)
    np.random.seed(1234)
    py_state, np_state = random.getstate(), np.random.get_state()
    env = SokobanEnv(dim_room=(6, 6), num_boxes=2)
    for seed in range(5):
        env.reset(task(seed))
    assert random.getstate() == py_state
    after = np.random.get_state()
    assert np.array_equal(after[1], np_state[1]) and after[2:] == np_state[2:]


def test_generation_retries_deterministically_when_gym_sokoban_fails() -> None:
    # 6x6 rooms with 2 boxes: gym-sokoban's generator raises for some seeds (e.g. no reverse-play score)
    env = SokobanEnv(dim_room=(6, 6), num_boxes=2)
    anchors = [env.reset(task(seed)).anchor for seed in range(40)]
    assert anchors == [env.reset(task(seed)).anchor for seed in range(40)]
    for anchor in anchors:
        assert anchor.count("X") == 2 and anchor.count("O") == 2


def test_options_are_validated() -> None:
    assert SokobanEnv(dim_room=[7, 8]).room_size == (7, 8)
    with pytest.raises(ConfigError, match="dim_room"):
        SokobanEnv(dim_room=(3, 6))
    with pytest.raises(ConfigError, match="num_boxes"):
        SokobanEnv(num_boxes=0)
    with pytest.raises(ConfigError, match="max_steps"):
        SokobanEnv(max_steps=0)


# -- observations and actions ---------------------------------------------------------------------------------------
def test_observation_legend_anchor_and_admissible() -> None:
    env = SokobanEnv(dim_room=(6, 7))
    obs = env.reset(task(3))
    assert LEGEND == "Legend: # wall, _ floor, O target, X box, √ box on target, P you, S you on a target."
    legend, grid = obs.text.split("\n", 1)
    assert legend == LEGEND
    assert obs.anchor == grid == env.grid
    rows = grid.split("\n")
    assert len(rows) == 6 and all(len(row) == 7 for row in rows)
    assert set(grid) <= set("#_OX√PS\n") and grid.count("P") + grid.count("S") == 1
    assert hash(obs.anchor) is not None
    assert obs.admissible == ["up", "down", "left", "right"]
    assert env.player_position == next((r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch in "PS")
    assert env.state_key() == (env.player_position, env.boxes)


def test_actions_are_case_insensitive_and_unknown_actions_raise() -> None:
    env = SokobanEnv()
    env.reset(task(0))
    assert env.step("  UP ").info["steps"] == 1
    with pytest.raises(ValueError, match="admissible actions: up, down, left, right"):
        env.step("jump")
    with pytest.raises(ValueError):
        env.step("push up")


def test_step_before_reset_and_after_done_raise() -> None:
    env = SokobanEnv(max_steps=1)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("up")
    env.reset(task(0))
    assert env.step("left").done
    with pytest.raises(RuntimeError, match="over"):
        env.step("left")


# -- every reward case, worked by hand ------------------------------------------------------------------------------
LEVEL = """
#######
#PXO__#
#_____#
#_XO__#
#######
"""


def test_every_reward_case_on_a_hand_written_level() -> None:
    env = SokobanEnv(max_steps=50)
    obs = env.reset_from_grid(LEVEL)
    assert obs.anchor == LEVEL.strip()

    def play(action: str, reward: float, effective: bool = True, moved_box: bool = False) -> str:
        result = env.step(action)
        assert result.reward == pytest.approx(reward), action
        assert result.info["action_is_effective"] is effective
        assert result.info["moved_box"] is moved_box
        assert result.info["player_pos"] == env.player_position
        return result.observation.anchor

    grid = play("right", -0.1 + 1, moved_box=True)  # box onto a target
    assert grid.split("\n")[1] == "#_P√__#"
    assert env.step("up").reward == pytest.approx(-0.1)  # into a wall: a wasted step, still penalised
    grid = play("right", -0.1 - 1, moved_box=True)  # box pushed off the target; the player now stands on it
    assert grid.split("\n")[1] == "#__SX_#"
    play("down", -0.1)
    play("right", -0.1)
    play("right", -0.1)
    play("up", -0.1)
    play("left", -0.1 + 1, moved_box=True)  # back onto the target
    for action in ["down", "left", "left", "left", "down"]:
        play(action, -0.1)
    play("left", -0.1, effective=False)  # a wall
    last = env.step("right")  # the second box onto the last target: solved
    assert last.reward == pytest.approx(-0.1 + 1 + 10)
    assert last.won and last.done and last.info["boxes_on_target"] == 2
    assert last.observation.anchor.split("\n")[3] == "#_P√__#"


def test_a_box_against_a_wall_does_not_move() -> None:
    env = SokobanEnv()
    env.reset_from_grid("######\n#PX#_#\n#O___#\n######")
    result = env.step("right")
    assert not result.info["action_is_effective"] and not result.info["moved_box"]
    assert result.reward == pytest.approx(-0.1) and not result.done


def test_done_at_max_steps_without_winning() -> None:
    env = SokobanEnv(max_steps=3)
    env.reset(task(11))
    results = [env.step("left") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert not results[-1].won


# -- the real gym-sokoban env as the reference ------------------------------------------------------------------
def _gym_sokoban_env_class() -> type:
    if importlib.util.find_spec("gym") is None or importlib.util.find_spec("imageio") is None:
        pytest.skip("comparing with gym-sokoban's own env needs: pip install gym==0.26.2 imageio")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from gym_sokoban.envs.sokoban_env import SokobanEnv as GymSokobanEnv
    return GymSokobanEnv


def test_rooms_are_gym_sokobans_own_for_the_seed() -> None:
    gym_env_class = _gym_sokoban_env_class()
    ours = SokobanEnv(dim_room=(6, 6), num_boxes=1)
    reference = gym_env_class(dim_room=(6, 6), max_steps=20, num_boxes=1, reset=False)
    for seed in range(30):
        random.seed(seed)
        np.random.seed(seed)
        reference.reset(render_mode="tiny_rgb_array")
        assert ours.reset(task(seed)).anchor == render_grid(state_from_gym(reference.room_fixed, reference.room_state))


@pytest.mark.parametrize(("dim_room", "num_boxes", "seeds"), [((6, 6), 1, range(40)), ((7, 7), 2, range(20))])
def test_steps_match_gym_sokoban_step_by_step(dim_room: tuple[int, int], num_boxes: int, seeds: range) -> None:
    """Random walks mixed with expert moves; rewards, done flags, moves and grids must equal gym-sokoban's."""
    gym_env_class = _gym_sokoban_env_class()
    max_steps = 60
    rng = random.Random(42)
    rewards_seen = set()
    for seed in seeds:
        ours = SokobanEnv(dim_room=dim_room, num_boxes=num_boxes, max_steps=max_steps)
        ours.reset(task(seed))
        reference = _gym_env_in_state(gym_env_class, ours, max_steps)
        expert = solve(ours) or []
        mode = seed % 3  # 0: random walk, 1: expert then random, 2: random prefix then expert
        actions = [rng.choice(ACTIONS) for _ in range(max_steps)]
        if mode == 1:
            actions = expert + actions
        elif mode == 2:
            actions = actions[:4]
        for i in range(max_steps):
            if mode == 2 and i == 4:
                actions += solve(ours) or [rng.choice(ACTIONS) for _ in range(max_steps)]
            action = actions[i]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _, ref_reward, ref_done, ref_info = reference.step(ACTIONS.index(action) + 1, "tiny_rgb_array")
            result = ours.step(action)
            where = f"seed {seed} step {i} action {action}"
            assert result.reward == ref_reward, where
            assert result.done == ref_done, where
            assert result.info["action_is_effective"] == ref_info["action.moved_player"], where
            assert result.info["moved_box"] == ref_info["action.moved_box"], where
            assert result.won == reference._check_if_all_boxes_on_target(), where
            assert result.info["boxes_on_target"] == reference.boxes_on_target, where
            assert result.observation.anchor == render_grid(
                state_from_gym(reference.room_fixed, reference.room_state)
            ), where
            assert result.info["player_pos"] == tuple(int(x) for x in reference.player_position), where
            rewards_seen.add(round(result.reward, 6))
            if result.done:
                break
    # the comparison covered every reward case: a step, solving, and with 2 boxes also a box on and a box off
    assert ({-0.1, 10.9} if num_boxes == 1 else {-0.1, 0.9, -1.1, 10.9}) <= rewards_seen


def _gym_env_in_state(gym_env_class: type, ours: SokobanEnv, max_steps: int) -> Any:
    """A gym-sokoban env put into our room, the way its own reset leaves it."""
    state = ours.state
    room_fixed = np.ones(ours.room_size, dtype=int)
    for pos in state.room.walls:
        room_fixed[pos] = 0
    for pos in state.room.targets:
        room_fixed[pos] = 2
    room_state = room_fixed.copy()
    for pos in state.boxes:
        room_state[pos] = 3 if pos in state.room.targets else 4
    room_state[state.player] = 5
    env = gym_env_class(dim_room=ours.room_size, max_steps=max_steps, num_boxes=len(state.boxes), reset=False)
    env.room_fixed, env.room_state = room_fixed, room_state
    env.box_mapping = {}
    env.player_position = np.argwhere(room_state == 5)[0]
    env.num_env_steps = 0
    env.reward_last = 0
    env.boxes_on_target = 0
    return env


# -- the expert solver ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("dim_room", "num_boxes"), [((6, 6), 1), ((6, 6), 2), ((7, 7), 2)])
def test_expert_actions_solve_the_room(dim_room: tuple[int, int], num_boxes: int) -> None:
    options = {"dim_room": dim_room, "num_boxes": num_boxes, "max_steps": 200}
    env = SokobanEnv(**options)
    for seed in range(30):
        actions = expert_actions(task(seed), options)
        assert actions, f"seed {seed}: no solution for a generated (solvable) room"
        env.reset(task(seed))
        results = [env.step(a) for a in actions]
        assert results[-1].won and results[-1].done, f"seed {seed}"
        assert not any(r.done for r in results[:-1])
        assert results[-1].reward == pytest.approx(-0.1 + 1 + 10)
        assert sum(r.reward for r in results) == pytest.approx(-0.1 * len(actions) + num_boxes + 10)


def test_solver_finds_the_shortest_solution() -> None:
    state = parse_grid("#######\n#P_X_O#\n#######")
    assert solve(state) == ["right", "right", "right"]
    assert solve(parse_grid("#######\n#O_X_P#\n#_____#\n#######")) == ["left", "left", "left"]
    # the player must walk around the box to push it left
    walk_around = solve(parse_grid("######\n#O_X_#\n#P___#\n######"))
    assert walk_around == ["right", "right", "right", "up", "left", "left"]


def test_solver_edge_cases() -> None:
    assert solve(parse_grid("#####\n#P√_#\n#####")) == []
    assert solve(parse_grid("#####\n#X__#\n#P_O#\n#####")) is None  # box stuck in a corner
    env = SokobanEnv(dim_room=(7, 7), num_boxes=2)
    env.reset(task(5))
    assert solve(env, max_nodes=3) is None  # budget exhausted
    full = solve(env)
    assert full is not None and solve(env.state) == full


def test_solver_works_from_the_current_state_mid_episode() -> None:
    env = SokobanEnv(max_steps=100)
    env.reset(task(9))
    for action in ["left", "up", "right"]:
        env.step(action)
    actions = solve(env)
    assert actions is not None
    results = [env.step(a) for a in actions]
    assert results[-1].won


def test_show_positions_adds_coordinates_and_the_expert_thinks_about_them():
    from agentforge.envs.sokoban import positions_line, relation
    from agentforge.tasks import TaskSampler
    from agentforge.training.sft import expert_response

    plain_env, env = SokobanEnv(num_gen_steps=5), SokobanEnv(num_gen_steps=5, show_positions=True)
    task = TaskSampler("sokoban", "eval").sample(1)[0]
    shown, hidden = env.reset(task), plain_env.reset(task)
    assert shown.anchor == hidden.anchor and shown.text.startswith(hidden.text)  # same state, one more line
    state = env.state
    (box,), (target,) = state.boxes, state.room.targets
    assert shown.text.endswith(positions_line(state))
    assert f"Box: row {box[0] + 1}, column {box[1] + 1}" in shown.text
    assert relation((2, 2), (1, 4)) == "the target is 1 up and 2 right of the box"
    assert relation((3, 3), (3, 3)) == "the box is on the target"
    thought = env.expert_thought("up")
    assert f"the target at row {target[0] + 1}, column {target[1] + 1}" in thought and thought.endswith("up.")
    assert plain_env.expert_thought("up") is None  # without positions: the generic thought
    assert expert_response("up", thought) == f"<think>{thought}</think><action>up</action>"
    assert expert_response("up") == "<think>Next move: up.</think><action>up</action>"


def test_the_spaced_grid_is_one_token_per_cell_and_plays_the_same_room(tiny_tokenizer):
    from agentforge.viewer.sokoban import parse_grid as viewer_rows

    compact, spaced = SokobanEnv(num_gen_steps=5), SokobanEnv(num_gen_steps=5, grid_style="spaced")
    first, second = compact.reset(task(3)), spaced.reset(task(3))
    assert second.anchor == "\n".join(" ".join(row) for row in first.anchor.splitlines())
    assert parse_grid(second.anchor) == parse_grid(first.anchor) == compact.state  # the same state, either way
    assert viewer_rows(second.text) == viewer_rows(first.text)
    for row in second.anchor.splitlines():  # every cell its own token: a column is a fixed token offset
        assert len(tiny_tokenizer(row)["input_ids"]) == len(row.split())
    for action in ("up", "left", "down", "right"):
        a, b = compact.step(action), spaced.step(action)
        assert (a.reward, a.done, a.won) == (b.reward, b.done, b.won)
        assert parse_grid(b.observation.anchor) == compact.state
        if a.done:
            break
    with pytest.raises(ConfigError, match="grid_style must be one of compact, spaced"):
        SokobanEnv(grid_style="wide")
