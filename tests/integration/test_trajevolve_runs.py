"""TrajEvolve on real parts: its rollout hooks label real Sokoban play by replay and the credit reaches the learner's
samples; one training iteration of the tiny model in vLLM's CPU engine logs the redundancy report."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from agentforge.agent.prompts import HistoryEntry, prompt_for
from agentforge.agent.render import AgentConfig
from agentforge.algorithms import make_algorithm
from agentforge.algorithms.necessity import NECESSARY, REDUNDANT
from agentforge.envs.base import ENVS, make_env
from agentforge.envs.sokoban import ACTIONS, SokobanEnv, apply_action
from agentforge.envs.sokoban_solver import expert_actions
from agentforge.errors import ConfigError
from agentforge.hosting.pool import LocalEnvPool
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
    algorithm = make_algorithm({"name": "trajevolve", "redundant_credit": "negate", "evolve": False})
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
    algorithm = make_algorithm({"name": "trajevolve", "evolve": False})
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
    from agentforge.commands.train import build_trainer
    from agentforge.tracking.tracker import read_metrics

    build_trainer(tiny_train_config("trajevolve_sokoban", "trainer.warm_start=false", "trainer.group_size=2",
                              "agent.sampling.max_new_tokens=12", "algorithm.discriminator=true",
                              "trainer.checkpoint_every=1")).fit()
    saved = next((tmp_path / "run" / "checkpoints").glob("iter_*"))
    from agentforge.reliability.safe_state import load_tensors

    # the discriminator travels with the checkpoint, read back without running code
    assert set(load_tensors(saved / "algorithm.pt")["discriminator"]) == {"weights", "x", "y"}
    rows: list[dict[str, Any]] = read_metrics(tmp_path / "run" / "metrics.jsonl")
    row = next(r for r in rows if r["iteration"] == 1)
    for key in ("train/loss", "train/trajevolve/steps_mean", "train/trajevolve/success_steps_mean",
                "train/trajevolve/redundant_step_fraction", "train/trajevolve/replays_per_trajectory",
                "train/trajevolve/diverged_trajectories", "train/trajevolve/discriminator_accuracy",
                "eval/trajevolve/steps_mean", "adv/hindsight_credited_turns", "train/trajevolve/evolved_samples"):
        assert key in row, key
    assert row["train/trajevolve/diverged_trajectories"] == 0


def test_the_step_discriminator_learns_replay_labels_and_labels_failures():
    """Round 1: replay labels train the discriminator (nothing to score yet) and it labels the lost episodes' steps.
    Round 2, the same play again: it is scored on the new replay labels before learning them (held-out accuracy)."""
    from agentforge.algorithms.trajevolve_rollout import BY_DISCRIMINATOR

    tasks = [Task("sokoban", 2), Task("sokoban", 7)]
    algorithm = make_algorithm({"name": "trajevolve", "discriminator": True, "evolve": False})

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
    # checkpointed with the run: a resumed algorithm predicts exactly what this one does and refits from its buffer
    resumed = make_algorithm({"name": "trajevolve", "discriminator": True, "evolve": False})
    assert not resumed.discriminator.trained
    resumed.load_state_dict(pickle.loads(pickle.dumps(algorithm.state_dict())))
    x = np.random.default_rng(0).normal(size=(16, algorithm.discriminator.weights.size))
    np.testing.assert_array_equal(resumed.discriminator.probability(x), algorithm.discriminator.probability(x))
    np.testing.assert_array_equal(resumed.discriminator._y, algorithm.discriminator._y)


# ------------------------------------------------------------------------------------------------ evolution
@pytest.fixture(scope="module")
def tiny_vllm(tiny_spec):
    from agentforge.engines import make_engine

    engine = make_engine("vllm", tiny_spec, {"dtype": "float32", "kv_cache_space_gb": 1})
    yield engine
    engine.close()


def thinking_episode(task: Task, plan: list[Any], index: int, group: int, tokenizer: Any) -> Episode:
    """Like `episode`, with `<think>` responses encoded by the tokenizer (so they can be scored) and `None` entries
    in `plan` played as invalid turns (nothing sent to the env)."""
    env = make_env("sokoban", SOKOBAN)
    observation = env.reset(task)
    trajectory = Trajectory(task, index)
    for action in plan:
        text = f"<think>I go {action}.</think><action>{action}</action>" if action else "no idea"
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        prompt = tokenizer.encode(observation.text, add_special_tokens=False)
        if action is None:
            trajectory.turns.append(Turn(prompt, ids, [-0.5] * len(ids), [False] * len(ids), text, None, False, -0.1,
                                         0.0, observation.anchor, observation.text, False, {"executed": False}))
            continue
        result = env.step(action)
        trajectory.turns.append(Turn(prompt, ids, [-0.5] * len(ids), [False] * len(ids), text, action, True,
                                     result.reward, result.reward, observation.anchor, observation.text, result.done,
                                     {"executed": True, **result.info}))
        trajectory.won = trajectory.won or result.won
        observation = result.observation
    return Episode(index + 3 * group, EpisodePlan(task, index, group), trajectory, observation, done=True)


def test_evolution_prunes_wins_regenerates_reasoning_and_branches(tiny_vllm):
    """Real Sokoban, the tiny model in vLLM: each group's detour win yields a pruned win (its necessary steps, with
    the pruned history in every prompt and engine-scored old log-probs) and a branch from its first redundant step;
    a lost episode with an invalid turn yields a branch from that turn. Rollout metrics count only played episodes."""
    from agentforge.algorithms.evolution import BRANCH, PRUNE
    from agentforge.rollout.metrics import rollout_summary
    from agentforge.rollout.workflow import RolloutStats
    from agentforge.types import SamplingConfig

    tokenizer = tiny_vllm.tokenizer
    tasks = [Task("sokoban", 2), Task("sokoban", 7)]
    episodes: list[Episode] = []
    solutions = {}
    for g, task in enumerate(tasks):
        solutions[g] = solution = expert_actions(task, SOKOBAN)
        episodes += [thinking_episode(task, detour(task, solution), 0, g, tokenizer),
                     thinking_episode(task, solution[:1] + [None] + solution[1:-1], 1, g, tokenizer)]
    played = list(episodes)
    algorithm = make_algorithm({"name": "trajevolve", "evolve_max_per_group": 3})
    hooks = algorithm.rollout_hooks("train")
    hooks.plan(tasks, 2)
    config = AgentConfig(max_turns=12, sampling=SamplingConfig(max_new_tokens=16))
    with LocalEnvPool("sokoban", SOKOBAN) as pool:
        ctx = RolloutContext(tiny_vllm, pool, prompt_for("sokoban"), config)
        hooks.before_first_turn(episodes, ctx)
        hooks.after_episodes(episodes, ctx)
    evolved = [e for e in episodes if e.trajectory.meta.get("evolved")]
    assert len(episodes) == len(played) + len(evolved)
    branches = at_start = 0
    for g, task in enumerate(tasks):
        source = played[2 * g].trajectory
        necessary = [t.action for t in source.turns if t.info["necessity"] == NECESSARY]
        mine = [e for e in evolved if e.plan.group == g]
        pruned = [e.trajectory for e in mine if e.trajectory.meta["evolved"] == PRUNE]
        branched = [e.trajectory for e in mine if e.trajectory.meta["evolved"] == BRANCH]
        first_redundant = next(k for k, t in enumerate(source.turns) if t.info["necessity"] == REDUNDANT)
        expected_prefixes = sorted([1] + ([first_redundant] if first_redundant else []))  # none at the first turn
        assert len(pruned) == 1 and len(branched) == len(expected_prefixes)
        short = pruned[0]
        assert [t.action for t in short.turns] == necessary and short.won and short.length < source.length
        assert sorted(e.trajectory.rollout_index for e in mine) == list(range(2, 2 + len(mine)))
        env, history = make_env("sokoban", SOKOBAN), []
        observation = env.reset(task)
        for k, turn in enumerate(short.turns):
            # the training prompt is the pruned episode's own: its state and history, no dropped detour step
            previous = necessary[k - 1] if k else None
            assert turn.prompt_ids == ctx.render(Episode(0, EpisodePlan(task, 0, g), short, observation, history),
                                                 k + 1)
            history.append(HistoryEntry(observation.text, turn.action))
            observation = env.step(turn.action).observation
            assert previous is None or f"[Your action {k}] {previous}" in tokenizer.decode(turn.prompt_ids)
            assert turn.info["necessity"] == NECESSARY and turn.info["reasoning"] in ("regenerated", "original")
            scored = tiny_vllm.score([turn.prompt_ids], [turn.response_ids])[0]
            np.testing.assert_allclose(turn.logprobs, scored, atol=1e-4)
            assert turn.response_text.endswith(f"<action>{turn.action}</action>")
        spans = [s for s in short.spans if s.kind == "think_only"]
        assert len(spans) == short.length and all(not s.role.trained for s in spans)
        assert f"already chosen: {necessary[0]}" in tokenizer.decode(spans[0].prompt_ids)
        # branches: from the win's first redundant step, and from the lost episode's invalid turn (after 1 step)
        assert sorted(len(t.meta["prefix"]) for t in branched) == expected_prefixes
        branches += len(branched)
        at_start += not first_redundant
        for branch in branched:
            assert branch.meta["prefix"] == solutions[g][: len(branch.meta["prefix"])] or \
                branch.meta["prefix"] == detour(task, solutions[g])[: len(branch.meta["prefix"])]
            assert 1 <= branch.length <= config.max_turns - len(branch.meta["prefix"])
    metrics = hooks.metrics()
    assert metrics["trajevolve/evolved_pruned"] == 2 and metrics["trajevolve/evolved_branched"] == branches >= 2
    assert metrics["trajevolve/evolved_samples"] == 2 + branches
    assert metrics["trajevolve/branch_at_start"] == at_start
    groups = [Group(task, [e.trajectory for e in episodes if e.plan.group == g]) for g, task in enumerate(tasks)]
    assert rollout_summary(groups, RolloutStats())["episodes"] == 4
    advantages = algorithm.advantages(groups)
    samples = samples_from_groups(groups, advantages, None, "algorithm 'trajevolve'")
    assert len(samples) == sum(t.length for g in groups for t in g.trajectories)


def test_evolution_is_training_only_and_a_none_credit_is_gigpo():
    algorithm = make_algorithm({"name": "trajevolve"})
    assert algorithm.rollout_hooks("train").options.evolution is not None
    assert algorithm.rollout_hooks("eval").options.evolution is None
    plain = make_algorithm({"name": "gigpo"})
    evolve_only = make_algorithm({"name": "trajevolve", "redundant_credit": "none"})
    task = Task("sokoban", 2)
    solution = expert_actions(task, SOKOBAN)
    episodes = [episode(task, detour(task, solution), 0, 0), episode(task, solution[:-1], 1, 0)]
    for turn in episodes[0].trajectory.turns[:2]:
        turn.info["necessity"] = REDUNDANT
    groups = [Group(task, [e.trajectory for e in episodes])]
    np.testing.assert_allclose(evolve_only.advantages(groups), plain.advantages(groups))
