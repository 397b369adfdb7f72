"""TJPO's built-in descriptors on trajectories played in the real engines (expert play, no model): the env info they
read is really there, and they tell different routes apart."""

from __future__ import annotations

import numpy as np
import pytest

from agentforge.algorithms import make_algorithm
from agentforge.algorithms.descriptors import get_descriptor
from agentforge.envs.alfworld.descriptors import alfworld_location_categories
from agentforge.envs.base import make_env
from agentforge.envs.sokoban_solver import solve
from agentforge.types import Group, Task, Trajectory, Turn

pytestmark = pytest.mark.integration


def play(env, task: Task, actions: list[str], index: int = 0) -> Trajectory:
    """Step an env through actions and record the turns the way the agent loop does (anchor = state before)."""
    observation = env.reset(task)
    turns = []
    for action in actions:
        result = env.step(action)
        turns.append(Turn(prompt_ids=[0], response_ids=[0], logprobs=[0.0], forced_mask=[False], response_text=action,
                          action=action, valid=True, reward=result.reward, env_reward=result.reward,
                          anchor=observation.anchor, observation=observation.text, done=result.done, info=result.info))
        observation = result.observation
        if result.done:
            break
    return Trajectory(task=task, rollout_index=index, turns=turns, won=bool(turns and result.won))


def test_sokoban_descriptors_on_solver_play_and_a_detour():
    env = make_env("sokoban", {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 30})
    for seed in range(50):  # a room whose solution is a few moves long and survives a back-and-forth detour first
        task = Task("sokoban", seed)
        env.reset(task)
        plan = solve(env)
        if not plan or len(plan) < 3:
            continue
        direct = play(env, task, plan, 0)
        back = {"up": "down", "down": "up", "left": "right", "right": "left"}[plan[0]]
        roundabout = play(env, task, [plan[0], back, *plan], 1)
        if direct.won and roundabout.won and roundabout.length == len(plan) + 2:
            break
    else:
        pytest.fail("no Sokoban room in seeds 0..49 with a 3+ move solution and a winnable detour")
    coverage = get_descriptor("spatial_coverage")
    height, width = env.room_size
    for trajectory in (direct, roundabout):
        vector = coverage(trajectory)
        assert vector.shape == (height * width,) and vector.sum() == pytest.approx(1.0)
        # every visited cell is a floor cell the player stood on: the start and one per step
        assert np.count_nonzero(vector) <= len(trajectory.turns) + 1
    transitions = get_descriptor("direction_transition")
    assert not np.allclose(transitions(direct), transitions(roundabout))
    tjpo = make_algorithm({"name": "tjpo", "descriptor": "spatial_coverage", "lambda": 0.3})
    advantages = tjpo.advantages([Group(task, [direct, roundabout, play(env, task, plan, 2)])])
    assert advantages.shape == (3 * len(plan) + 2,) and np.all(np.isfinite(advantages))
    credit = [t.meta["diversity_credit"] for t in (direct, roundabout)]
    assert credit[1] > credit[0]  # the detour is the odd one out of the group


def test_alfworld_descriptors_on_walkthrough_play():
    pytest.importorskip("textworld")
    pytest.importorskip("alfworld")
    from agentforge.envs.alfworld.expert import expert_actions

    env = make_env("alfworld", {})
    try:
        task = Task("alfworld", 0)
        plan = expert_actions(task)
        assert plan
        trajectory = play(env, task, plan)
        assert trajectory.won
        locations = get_descriptor("location")(trajectory)
        categories = alfworld_location_categories()
        visited = {t.info["location_category"] for t in trajectory.turns if t.info.get("location_category")}
        assert visited and {categories[i] for i in np.flatnonzero(locations)} == visited
        assert "other" not in visited  # the engine's receptacle names map onto the vocabulary
        actions = get_descriptor("action_type")(trajectory)
        assert actions.sum() == pytest.approx(1.0) and actions[0] > 0  # `go to` is always part of a walkthrough
    finally:
        env.close()


def test_tjpo_alfworld_recipe_trains_one_iteration_on_the_tiny_model(tmp_path):
    """The headline recipe's whole path: real ALFWorld rollouts, location credit, update, eval with diversity."""
    pytest.importorskip("textworld")
    pytest.importorskip("alfworld")
    import json

    from agentforge.commands.train import build_trainer
    from agentforge.schema.compose import compose_config

    cfg = compose_config([
        "recipe=tjpo_alfworld", "command=train", "model=tiny", "engine=hf", "model.dtype=float32",
        "learner.dtype=float32", "trainer.warm_start=false", "trainer.iterations=1", "trainer.tasks_per_iteration=1",
        "trainer.group_size=2", "trainer.eval_tasks=1", "trainer.eval_group_size=2", "trainer.eval_every=1",
        "trainer.checkpoint_every=0", "agent.max_turns=2", "agent.sampling.max_new_tokens=16",
        "env_pool.kind=local", "logger.wandb=false",
    ], run_dir=str(tmp_path / "run"))
    build_trainer(cfg).fit()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert "adv/diversity_credit_abs_mean" in rows[1] and "adv/div_pair/location" in rows[1]
    assert rows[1]["eval/div_groups/location"] == 0 or "eval/div_pair/location" in rows[1]
    assert "eval/div_groups/action_type" in rows[0]  # the cross-metric set: every ALFWorld descriptor is reported
    sample = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert len(sample["meta"]["descriptor"]["location"]) > 10 and "diversity_credit" in sample["meta"]
