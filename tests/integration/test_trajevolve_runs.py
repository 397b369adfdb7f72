"""TrajEvolve on real parts: its rollout hooks label real Sokoban play by replay and the credit reaches the learner's
samples; one training iteration of the tiny model in vLLM's CPU engine logs the redundancy report."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from agentforge.agent.prompts import prompt_for
from agentforge.agent.render import AgentConfig
from agentforge.algorithms import make_algorithm
from agentforge.algorithms.necessity import NECESSARY, REDUNDANT
from agentforge.envs.base import ENVS, make_env
from agentforge.envs.pool import LocalEnvPool
from agentforge.envs.sokoban import ACTIONS, SokobanEnv, apply_action
from agentforge.envs.sokoban_solver import expert_actions
from agentforge.errors import ConfigError
from agentforge.learner import samples_from_groups
from agentforge.rollout.workflow import Episode, EpisodePlan, RolloutContext
from agentforge.types import Group, Task, Trajectory, Turn

pytestmark = pytest.mark.integration

SOKOBAN = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 30}
OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}


class UnreplayableSokoban(SokobanEnv):
    replayable = False


ENVS.register("trajevolve_test_unreplayable")(UnreplayableSokoban)


def episode(task: Task, plan: list[str], index: int, group: int) -> Episode:
    """Real Sokoban play of `plan`, logged as the workflow logs it, as a finished episode."""
    env = make_env("sokoban", SOKOBAN)
    observation = env.reset(task)
    trajectory = Trajectory(task, index)
    for action in plan:
        result = env.step(action)
        trajectory.turns.append(Turn([1], [2, 3], [-0.1, -0.2], [False, False], f"<action>{action}</action>", action,
                                     True, result.reward, result.reward, observation.anchor, observation.text,
                                     result.done, {"executed": True, **result.info}))
        trajectory.won = trajectory.won or result.won
        observation = result.observation
    return Episode(index + 2 * group, EpisodePlan(task, index, group), trajectory, observation, done=True)


def detour(task: Task, solution: list[str]) -> list[str]:
    """The solution with [away, back] inserted where the player first stands against a wall (`back` changes nothing
    there) and can step `away` without touching a box: dropping `away` turns `back` into a move into the wall."""
    env = make_env("sokoban", SOKOBAN)
    env.reset(task)
    for index, action in enumerate(solution):
        for back in ACTIONS:
            stay, leave = apply_action(env.state, back), apply_action(env.state, OPPOSITE[back])
            if not stay.moved_player and leave.moved_player and not leave.moved_box:
                return solution[:index] + [OPPOSITE[back], back] + solution[index:]
        env.step(action)
    raise AssertionError(f"no wall beside the expert's path in {task.describe()}")


def test_hooks_label_won_episodes_and_the_credit_reaches_the_samples():
    tasks = [Task("sokoban", 2), Task("sokoban", 7)]
    episodes: list[Episode] = []
    for g, task in enumerate(tasks):
        solution = expert_actions(task, SOKOBAN)
        episodes += [episode(task, detour(task, solution), 0, g), episode(task, solution[:-1], 1, g)]
    won = [e.trajectory for e in episodes if e.trajectory.won]
    assert len(won) == 2
    algorithm = make_algorithm({"name": "trajevolve", "redundant_credit": "negate"})
    hooks = algorithm.rollout_hooks("train")
    hooks.plan(tasks, 2)
    with LocalEnvPool("sokoban", SOKOBAN) as pool:
        ctx = RolloutContext(None, pool, prompt_for("sokoban"), AgentConfig())
        hooks.before_first_turn(episodes, ctx)
        hooks.after_episodes(episodes, ctx)
    for trajectory in won:
        labels = [turn.info["necessity"] for turn in trajectory.turns]
        assert REDUNDANT in labels and NECESSARY in labels
        assert trajectory.meta["necessity"]["status"] == "labelled"
        assert trajectory.meta["necessity"]["redundant"] == [k for k, lab in enumerate(labels) if lab == REDUNDANT]
        assert trajectory.meta["necessity"]["pruned_wins"] is True
    lost = [e.trajectory for e in episodes if not e.trajectory.won]
    assert all("necessity" not in t.turns[0].info and "necessity" not in t.meta for t in lost)
    metrics = hooks.metrics()
    lengths = [e.trajectory.length for e in episodes]
    assert metrics["trajevolve/steps_mean"] == pytest.approx(np.mean(lengths))
    assert metrics["trajevolve/success_steps_mean"] == pytest.approx(np.mean([t.length for t in won]))
    redundant = sum(t.meta["necessity"]["redundant"].__len__() for t in won)
    assert metrics["trajevolve/redundant_step_fraction"] == pytest.approx(redundant / sum(t.length for t in won))
    replays = sum(t.meta["necessity"]["replays"] for t in won)
    assert metrics["trajevolve/replays_per_trajectory"] == pytest.approx(replays / 2)
    assert metrics["trajevolve/labelled_trajectories"] == 2 and metrics["trajevolve/diverged_trajectories"] == 0
    assert metrics["trajevolve/pruned_trajectories"] == 2 and metrics["trajevolve/pruned_win_rate"] == 1.0

    groups = [Group(task, [e.trajectory for e in episodes if e.plan.group == g]) for g, task in enumerate(tasks)]
    advantages = algorithm.advantages(groups)
    flat = [(t, turn) for group in groups for t in group.trajectories for turn in t.turns]
    for (trajectory, turn), value in zip(flat, advantages, strict=True):
        if trajectory.won and turn.info["necessity"] == REDUNDANT:
            assert value <= 0
    assert algorithm.last_metrics["hindsight_credited_turns"] >= 2
    samples = samples_from_groups(groups, advantages, None, "algorithm 'trajevolve'")
    np.testing.assert_allclose([s.advantage for s in samples], advantages)


def test_a_diverged_episode_is_skipped_and_counted_and_eval_reports_steps_without_replays():
    task = Task("sokoban", 7)
    solution = expert_actions(task, SOKOBAN)
    bad = episode(task, solution, 0, 0)
    bad.trajectory.turns[0].observation = "something the env never showed"
    algorithm = make_algorithm({"name": "trajevolve"})
    with LocalEnvPool("sokoban", SOKOBAN) as pool:
        ctx = RolloutContext(None, pool, prompt_for("sokoban"), AgentConfig())
        train = algorithm.rollout_hooks("train")
        train.plan([task], 1)
        train.after_episodes([bad], ctx)
        evaluation = algorithm.rollout_hooks("eval")
        evaluation.plan([task], 1)
        evaluation.after_episodes([episode(task, solution, 0, 0)], ctx)
    assert bad.trajectory.meta["necessity"]["status"] == "diverged"
    assert all("necessity" not in turn.info for turn in bad.trajectory.turns)
    assert train.metrics()["trajevolve/diverged_trajectories"] == 1
    assert train.metrics()["trajevolve/labelled_trajectories"] == 0
    assert set(evaluation.metrics()) == {"trajevolve/steps_mean", "trajevolve/success_steps_mean"}


def test_an_env_that_cannot_replay_is_refused_before_the_first_turn():
    algorithm = make_algorithm({"name": "trajevolve"})
    hooks = algorithm.rollout_hooks("train")
    with LocalEnvPool("trajevolve_test_unreplayable", SOKOBAN) as pool, pytest.raises(ConfigError) as error:
        hooks.before_first_turn([], RolloutContext(None, pool, prompt_for("sokoban"), AgentConfig()))
    assert "trajevolve_test_unreplayable" in str(error.value) and "discriminator" in str(error.value)
    make_algorithm({"name": "trajevolve", "counterfactual": False}).rollout_hooks("train").before_first_turn(
        [], RolloutContext(None, LocalEnvPool("trajevolve_test_unreplayable", SOKOBAN), prompt_for("sokoban"),
                           AgentConfig()))


def test_one_training_iteration_logs_the_redundancy_report(tmp_path, tiny_train_config):
    """The whole loop with the discriminator on: rollout hooks, labels, credit, update, eval. (The tiny model wins
    nothing, so there is nothing to label: this checks the wiring, the label tests above check the labels.)"""
    from agentforge.tracking.tracker import read_metrics
    from agentforge.training.trainer import Trainer

    Trainer(tiny_train_config("trajevolve_sokoban", "trainer.warm_start=false", "trainer.group_size=2",
                              "agent.sampling.max_new_tokens=12", "algorithm.discriminator=true")).fit()
    rows: list[dict[str, Any]] = read_metrics(tmp_path / "run" / "metrics.jsonl")
    row = next(r for r in rows if r["iteration"] == 1)
    for key in ("train/loss", "train/trajevolve/steps_mean", "train/trajevolve/success_steps_mean",
                "train/trajevolve/redundant_step_fraction", "train/trajevolve/replays_per_trajectory",
                "train/trajevolve/diverged_trajectories", "train/trajevolve/discriminator_accuracy",
                "eval/trajevolve/steps_mean", "adv/hindsight_credited_turns"):
        assert key in row, key
    assert row["train/trajevolve/diverged_trajectories"] == 0


def test_the_step_discriminator_learns_replay_labels_and_labels_failures():
    """Round 1: replay labels train the discriminator (nothing to score yet) and it labels the lost episodes' steps.
    Round 2, the same play again: it is scored on the new replay labels before learning them (held-out accuracy)."""
    from agentforge.algorithms.trajevolve_rollout import BY_DISCRIMINATOR

    tasks = [Task("sokoban", 2), Task("sokoban", 7)]
    algorithm = make_algorithm({"name": "trajevolve", "discriminator": True})

    def play() -> list[Episode]:
        out: list[Episode] = []
        for g, task in enumerate(tasks):
            solution = expert_actions(task, SOKOBAN)
            out += [episode(task, detour(task, solution), 0, g), episode(task, solution[:-1], 1, g)]
        return out

    with LocalEnvPool("sokoban", SOKOBAN) as pool:
        ctx = RolloutContext(None, pool, prompt_for("sokoban"), AgentConfig())
        rounds = []
        for _ in range(2):
            episodes = play()
            hooks = algorithm.rollout_hooks("train")
            hooks.plan(tasks, 2)
            hooks.after_episodes(episodes, ctx)
            rounds.append((episodes, hooks.metrics()))
    (first, first_metrics), (_, second_metrics) = rounds
    replay_steps = sum(e.trajectory.length for e in first if e.trajectory.won)
    assert first_metrics["trajevolve/discriminator_trained_steps"] == replay_steps
    assert first_metrics["trajevolve/discriminator_scored_steps"] == 0
    lost = [e.trajectory for e in first if not e.trajectory.won]
    assert first_metrics["trajevolve/discriminator_labelled_trajectories"] == len(lost) == 2
    for trajectory in lost:
        assert {turn.info["necessity_by"] for turn in trajectory.turns} <= {BY_DISCRIMINATOR, "no_op"}
        assert {turn.info["necessity"] for turn in trajectory.turns} <= {NECESSARY, REDUNDANT}
    assert second_metrics["trajevolve/discriminator_scored_steps"] == replay_steps
    # the same steps again: a fitted logistic regression gets the (mostly necessary) labels it learned largely right
    assert second_metrics["trajevolve/discriminator_accuracy"] >= 0.75
    assert 0.0 <= second_metrics["trajevolve/discriminator_redundant_accuracy"] <= 1.0
    assert algorithm.discriminator is not None and algorithm.discriminator.trained
