"""Success by the length of the plan a task needs (evaluation/depth.py): buckets from the expert's solution, Wilson
intervals, Sokoban's depth equal to its BFS solver's shortest solution, and the eval table's columns."""

from __future__ import annotations

import pytest

from agentforge.evaluation.depth import success_by_depth
from agentforge.schema.compose import compose_config
from agentforge.types import Group, Task, Trajectory

pytestmark = pytest.mark.unit


def group(seed: int, wins: list[bool]) -> Group:
    task = Task(env="sokoban", seed=seed)
    return Group(task=task, trajectories=[Trajectory(task=task, rollout_index=i, won=w) for i, w in enumerate(wins)])


def test_success_is_split_by_solution_length_with_intervals():
    depths = {0: 1, 1: 1, 2: 2, 3: 5, 4: None}
    out = success_by_depth([group(0, [True, True]), group(1, [False, True]), group(2, [False, False]),
                            group(3, [True, False]), group(4, [True])], lambda task: depths[task.seed])
    assert out["success_depth_1"] == 0.75 and out["episodes_depth_1"] == 4
    assert out["success_depth_2"] == 0.0 and out["success_depth_3+"] == 0.5 and out["episodes_depth_none"] == 1
    assert out["success_depth_1_lo"] < 0.75 < out["success_depth_1_hi"]


def test_sokobans_depth_is_the_bfs_solvers_shortest_solution_and_eval_rows_show_it():
    from agentforge.commands.builders import build_task_depth
    from agentforge.envs.sokoban_solver import expert_actions
    from agentforge.evaluation.report import eval_markdown

    cfg = compose_config(["command=eval", "recipe=debug", "env.dim_room=[6,6]"])
    depth = build_task_depth(cfg)
    options = {"dim_room": [6, 6], **{k: v for k, v in cfg.env.items() if k not in ("name", "dim_room")}}
    for seed in range(5):
        task = Task(env="sokoban", seed=seed, split="test")
        assert depth(task) == len(expert_actions(task, options))
    assert build_task_depth(compose_config(["command=eval", "recipe=debug", "env=textarena"])) is None
    report = {"env": "sokoban", "tasks": {"num_tasks": 2, "split": "test"}, "samples_per_task": 4,
              "temperature": 0.4, "descriptors": [], "checkpoint": None, "interventions": None,
              "rows": [{"name": "GRPO", "metrics": {"success_rate": 0.5, "episodes": 8, "success_depth_1": 0.75,
                                                    "success_depth_3+": 0.0}}]}
    header = eval_markdown(report).splitlines()[2]
    assert "| Invalid | 1 move | 3+ moves |" in header  # a bucket no task fell in has no column


def test_held_out_sets_can_be_selected_by_how_long_a_plan_they_need():
    from agentforge.commands.builders import build_held_out, build_task_depth
    from agentforge.errors import ConfigError

    cfg = compose_config(["command=eval", "recipe=debug", "env.dim_room=[6,6]", "held_out.reserve=12",
                          "held_out.min_depth=3", "held_out.max_depth=8"])
    held_out, keyer = build_held_out(cfg, {})
    keyer.close()
    depth = build_task_depth(cfg)
    for split in ("test", "eval"):
        tasks = held_out.tasks(split, 12)
        assert len(tasks) == 12 and all(3 <= depth(t) <= 8 for t in tasks)
        found = held_out.sets[split]["sokoban"]
        assert found.not_selected > 0 and "outside the selection" in found.describe()
    with pytest.raises(ConfigError, match="no single expert"):
        build_held_out(compose_config(["command=eval", "recipe=debug", "env=textarena", "held_out.min_depth=3"]), {})
