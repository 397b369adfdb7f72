"""Counterfactual necessity labels (`algorithms.necessity`) on real envs: hand-built detours through real Sokoban
rooms (cheap replays) and the paper's Table 5 case on a real ALFWorld game; divergence, non-replayable envs."""

from __future__ import annotations

from typing import Any

import pytest

from agentforge.algorithms.necessity import (
    BY_DEPENDENCE,
    BY_REPLAY,
    DIVERGED,
    LABELLED,
    NECESSARY,
    NO_OP,
    NOT_EXECUTED,
    NOT_WON,
    REDUNDANT,
    label_necessity,
    pruned_actions,
    verify_pruned,
)
from agentforge.envs.base import ENVS, make_env
from agentforge.envs.sokoban import ACTIONS, SokobanEnv, apply_action
from agentforge.envs.sokoban_solver import expert_actions
from agentforge.errors import ConfigError
from agentforge.hosting.pool import LocalEnvPool
from agentforge.types import Task, Trajectory, Turn

pytestmark = pytest.mark.integration

SOKOBAN = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 30}
OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}


class FixedSokoban(SokobanEnv):
    """Sokoban that declares it cannot replay (as an env with unseeded randomness would)."""

    replayable = False


ENVS.register("necessity_test_unreplayable")(FixedSokoban)


def logged(env_name: str, options: dict[str, Any], task: Task, plan: list[str | None]) -> Trajectory:
    """Play `plan` on a real env and log it as the workflow does; None is an invalid response the env never sees."""
    env = make_env(env_name, options)
    observation = env.reset(task)
    trajectory = Trajectory(task, 0)
    for action in plan:
        info: dict[str, Any] = {"executed": action is not None}
        reward, done = 0.0, False
        before = observation
        if action is not None:
            result = env.step(action)
            info.update(result.info)
            reward, done, observation = result.reward, result.done, result.observation
            trajectory.won = trajectory.won or result.won
        trajectory.turns.append(Turn([1], [2], [-0.1], [False], "", action, action is not None, reward, reward,
                                     before.anchor, before.text, done, info))
    env.close()
    return trajectory


def sokoban_detour(task: Task) -> tuple[list[str], int, str, str]:
    """The expert's solution and the first point on it where the player stands against a wall (a move `back` that
    changes nothing) and can step `away` from it without touching a box: the detour is [away, back]."""
    solution = expert_actions(task, SOKOBAN)
    assert solution
    env = make_env("sokoban", SOKOBAN)
    env.reset(task)
    for index, action in enumerate([*solution, None]):
        state = env.state
        for back in ACTIONS:
            away = OPPOSITE[back]
            stay, leave = apply_action(state, back), apply_action(state, away)
            if not stay.moved_player and leave.moved_player and not leave.moved_box:
                return solution, index, away, back
        if action is not None:
            env.step(action)
    pytest.skip(f"no wall beside the expert's path in {task.describe()}")


@pytest.fixture(scope="module")
def pool():
    pool = LocalEnvPool("sokoban", SOKOBAN)
    yield pool
    pool.close()


@pytest.mark.parametrize("seed", [2, 7])
def test_a_detour_from_a_wall_is_redundant_with_its_dependent_and_the_shortest_path_necessary(pool, seed):
    """[away, back] inserted where the player stands at a wall: dropping `away` makes `back` a move into the wall
    (Dep), the room is still solved, so both are redundant with one replay; every step of the BFS expert's shortest
    solution is necessary. Replays: 1 verification + 1 for the detour + 1 per expert step."""
    task = Task("sokoban", seed)
    solution, at, away, back = sokoban_detour(task)
    plan = solution[:at] + [away, back] + solution[at:]
    trajectory = logged("sokoban", SOKOBAN, task, plan)
    assert trajectory.won
    [result] = label_necessity(pool, [trajectory])
    assert result.status == LABELLED
    expected = [NECESSARY] * len(plan)
    expected[at] = expected[at + 1] = REDUNDANT
    assert result.labels == expected
    assert result.reasons[at] == BY_REPLAY and result.reasons[at + 1] == BY_DEPENDENCE
    assert result.dependents[at] == [at + 1]
    assert result.replays == 1 + 1 + len(solution)
    assert pruned_actions(trajectory, result) == solution  # the prune strategy's sequence: the detour is gone
    assert verify_pruned(pool, [trajectory], [result]) == [True] and result.replays == 3 + len(solution)


def test_invalid_turns_and_no_ops_are_redundant_without_replay_and_batches_walk_together(pool):
    """An invalid response (never stepped) and a move into a wall (stepped, not carried out) need no replay; two
    trajectories are labelled in the same batched rounds; a lost episode is left unlabelled."""
    task = Task("sokoban", 2)
    solution, at, _, back = sokoban_detour(task)
    plan = solution[:at] + [None, back] + solution[at:]
    trajectory = logged("sokoban", SOKOBAN, task, plan)
    other = logged("sokoban", SOKOBAN, Task("sokoban", 7), expert_actions(Task("sokoban", 7), SOKOBAN))
    lost = logged("sokoban", SOKOBAN, task, solution[:-1])
    assert trajectory.won and other.won and not lost.won
    first, second, third = label_necessity(pool, [trajectory, other, lost])
    assert first.reasons[at] == NOT_EXECUTED and first.reasons[at + 1] == NO_OP
    assert first.redundant == [at, at + 1]
    assert first.replays == 1 + len(solution)
    assert second.labels == [NECESSARY] * other.length and second.replays == 1 + other.length
    assert third.status == NOT_WON and third.replays == 0 and third.labels == [None] * lost.length
    # nothing to prune in `other` (all necessary) and no labels in `lost`: no replay for either
    assert verify_pruned(pool, [trajectory, other, lost], [first, second, third]) == [True, None, None]
    assert second.replays == 1 + other.length and third.replays == 0


def test_a_replay_that_differs_from_the_log_is_skipped_and_counted_not_labelled(pool):
    task = Task("sokoban", 7)
    trajectory = logged("sokoban", SOKOBAN, task, expert_actions(task, SOKOBAN))
    trajectory.turns[1].observation += " "  # as if the env had shown something else on this turn
    [result] = label_necessity(pool, [trajectory])
    assert result.status == DIVERGED and "turn 2" in result.divergence
    assert result.labels == [None] * trajectory.length and result.replays == 1
    [unchecked] = label_necessity(pool, [trajectory], verify=False)  # StraTA's audit: no verification replay
    assert unchecked.status == LABELLED and unchecked.replays == trajectory.length


def test_an_env_that_cannot_replay_is_refused_naming_it_and_the_fallback():
    task = Task("necessity_test_unreplayable", 2)
    trajectory = logged("sokoban", SOKOBAN, Task("sokoban", 2), expert_actions(Task("sokoban", 2), SOKOBAN))
    trajectory.task = task
    with LocalEnvPool("necessity_test_unreplayable", SOKOBAN) as pool, pytest.raises(ConfigError) as error:
        label_necessity(pool, [trajectory])
    message = str(error.value)
    assert "necessity_test_unreplayable" in message and "FixedSokoban" in message
    assert "discriminator" in message and "algorithm.counterfactual=false" in message


# -- the paper's Table 5 on a real ALFWorld game ---------------------------------------------------------------------
def alfworld_detour(env: Any, task: Task, expert: list[str]) -> list[str]:
    """Two unsuccessful searches before the expert's plan: go to an openable receptacle the plan never mentions,
    open it; twice (the paper's drawer 1 / drawer 2)."""
    observation = env.reset(task)
    detour: list[str] = []
    for command in observation.admissible or []:
        if not command.startswith("go to "):
            continue
        receptacle = command[len("go to "):]
        if any(receptacle in action for action in expert):
            continue
        env.reset(task)
        for action in detour:
            env.step(action)
        result = env.step(command)
        if f"open {receptacle}" in (result.observation.admissible or []):
            detour += [command, f"open {receptacle}"]
            if len(detour) == 4:
                return detour
    pytest.skip(f"fewer than two openable receptacles off the expert's path in {task.describe()}")


def test_table5_case_on_a_real_alfworld_game():
    """Go to and open two receptacles the plan does not need, then the planner's walkthrough: steps 0-3 are
    redundant (0 and 2 by replay; 1 and 3 because dropping the `go to` makes their `open` "Nothing happens."), and
    the first expert step (going where the object is) is necessary, its dropped replay making later steps
    inexecutable, as in the paper's Table 5."""
    pytest.importorskip("textworld")
    pytest.importorskip("alfworld")
    from agentforge.envs.alfworld.expert import expert_actions as alfworld_expert

    task = Task("alfworld", 0)
    expert = alfworld_expert(task, {})
    assert expert
    env = make_env("alfworld", {})
    try:
        detour = alfworld_detour(env, task, expert)
    finally:
        env.close()
    trajectory = logged("alfworld", {}, task, detour + expert)
    assert trajectory.won
    with LocalEnvPool("alfworld", {}) as pool:
        [result] = label_necessity(pool, [trajectory])
    assert result.status == LABELLED
    assert result.labels[:4] == [REDUNDANT] * 4
    assert result.reasons[:4] == [BY_REPLAY, BY_DEPENDENCE, BY_REPLAY, BY_DEPENDENCE]
    assert result.dependents[0] == [1] and result.dependents[2] == [3]
    assert result.labels[4] == NECESSARY and result.dependents[4]
    assert all(label is not None for label in result.labels)
    assert result.replays == 1 + 2 + sum(reason == BY_REPLAY for reason in result.reasons[4:])
    assert pruned_actions(trajectory, result)[:1] == expert[:1]
    with LocalEnvPool("alfworld", {}) as pool:
        assert verify_pruned(pool, [trajectory], [result]) == [True]


def test_labels_through_the_ray_pool_equal_the_in_process_ones(pool):
    """The same detour trajectories labelled through Ray workers (replays batched and spread over two workers)
    and in process: identical labels, Dep sets and replay counts."""
    import ray

    from agentforge.hosting.pool import RayEnvPool, ensure_ray

    trajectories = []
    for seed in (2, 7):
        task = Task("sokoban", seed)
        solution, at, away, back = sokoban_detour(task)
        trajectories.append(logged("sokoban", SOKOBAN, task, solution[:at] + [away, back] + solution[at:]))
    expected = label_necessity(pool, trajectories)
    started = not ray.is_initialized()
    ensure_ray(num_cpus=2)
    try:
        with RayEnvPool("sokoban", SOKOBAN, num_workers=2) as ray_pool:
            assert label_necessity(ray_pool, trajectories) == expected
    finally:
        if started:
            ray.shutdown()
