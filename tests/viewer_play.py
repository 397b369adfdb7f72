"""Real episodes for the viewer's tests without a model: each env's own expert plays real tasks (some cut short, so
groups mix successes and failures), the turns are recorded as the agent loop records them, advantages come from
the real GRPO, and the records are written by the trainer's own writer (`tracking.trajectories`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentforge.algorithms import make_algorithm
from agentforge.envs.base import expert_for, make_env
from agentforge.tasks import TaskSampler
from agentforge.tracking.trajectories import trajectory_file, trajectory_records, write_records
from agentforge.training.sft import expert_response
from agentforge.types import Group, Trajectory, Turn


def play(env_name: str, task: Any, actions: list[str], rollout_index: int, env: Any) -> Trajectory:
    observation = env.reset(task)
    trajectory = Trajectory(task=task, rollout_index=rollout_index)
    for action in actions:
        result = env.step(action)
        trajectory.turns.append(Turn(
            prompt_ids=[], response_ids=[], logprobs=[], forced_mask=[], response_text=expert_response(action),
            action=action, valid=True, reward=result.reward, env_reward=result.reward, anchor=observation.anchor,
            observation=observation.text, done=result.done, info={"executed": True, "parse_error": None,
                                                                  **result.info}))
        observation = result.observation
        trajectory.won = trajectory.won or result.won
        if result.done:
            break
    return trajectory


def expert_groups(env_name: str, tasks: int = 2, group_size: int = 3) -> list[Group]:
    """Per task: the full expert play (won) and shorter prefixes of it (not won); tasks whose expert needs at least
    two actions, so that a prefix is an unfinished episode."""
    env = make_env(env_name)
    groups = []
    try:
        for task in TaskSampler(env_name, "eval").sample(10 * tasks):
            actions = expert_for(env_name)(task, {}) or []
            if len(actions) < 2:
                continue
            cuts = [max(1, (len(actions) - 1) * k // max(1, group_size - 1)) for k in range(1, group_size)]
            plays = [actions] + [actions[:cut] for cut in cuts]
            groups.append(Group(task, [play(env_name, task, a, i, env) for i, a in enumerate(plays)]))
            if len(groups) == tasks:
                break
    finally:
        env.close()
    return groups


def expert_records(env_name: str, tasks: int = 2, group_size: int = 3) -> list[dict[str, Any]]:
    groups = expert_groups(env_name, tasks, group_size)
    advantages = make_algorithm("grpo").advantages(groups)
    return trajectory_records(groups, advantages)


def expert_run(run_dir: Path, env_name: str, iterations: int = 2, tasks: int = 2, group_size: int = 3) -> Path:
    """A run dir laid out as a train run writes it (config.yaml, trajectories/iter_NNNNN.jsonl.gz)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(f"command: train\nenv:\n  name: {env_name}\nalgorithm:\n  name: grpo\n")
    records = expert_records(env_name, tasks, group_size)
    for iteration in range(1, iterations + 1):
        write_records(trajectory_file(run_dir, iteration), ({"iteration": iteration, **r} for r in records))
    return run_dir
