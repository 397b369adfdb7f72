"""On-policy distillation's advantages (objective/distillation.py, algorithms/opd.py) against hand computations, and
the config checks that name what a run without a teacher is missing."""

from __future__ import annotations

import numpy as np
import pytest

from agentforge.algorithms import make_algorithm
from agentforge.commands.overrides import override_problems
from agentforge.errors import ConfigError
from agentforge.learner.batch import policy_samples
from agentforge.objective.distillation import reverse_kl_advantages
from agentforge.types import Group, Task, Trajectory, Turn

pytestmark = pytest.mark.unit


def test_the_advantage_is_the_teacher_minus_the_student_on_trained_tokens_only():
    teacher, student = np.array([-1.0, -2.0, -0.5, -30.0]), np.array([-1.5, -1.0, -0.5, -1.0])
    mask = np.array([True, True, False, True])
    got = reverse_kl_advantages(teacher, student, mask, outcome=0.8, outcome_weight=0.5, clamp=20.0)
    np.testing.assert_allclose(got, [0.5 + 0.4, -1.0 + 0.4, 0.0, -20.0 + 0.4], rtol=1e-6)


def episode(seed: int, rewards: list[float], rng: np.random.Generator) -> Trajectory:
    task = Task(env="sokoban", seed=seed)
    turns = []
    for k, r in enumerate(rewards):
        n = int(rng.integers(2, 6))
        turns.append(Turn(prompt_ids=[1, 2, 3 + k], response_ids=list(rng.integers(10, 99, n)),
                          logprobs=list(rng.normal(-1.0, 0.3, n)), forced_mask=[bool(i == 1) for i in range(n)],
                          response_text="", action="up", valid=True, reward=r, env_reward=r, anchor=str(k),
                          observation="o"))
    return Trajectory(task=task, rollout_index=seed, turns=turns)


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_opd_sets_token_advantages_from_the_teacher_on_a_random_batch(weight):
    rng = np.random.default_rng(3)
    groups = [Group(task=Task(env="sokoban", seed=0), trajectories=[
        episode(0, [0.0, 1.0], rng), episode(1, [0.0, 0.0, 0.0], rng), episode(2, [0.5], rng)])]
    samples, owners = policy_samples(groups, "opd")
    teacher = [rng.normal(-1.0, 0.5, len(s.input_ids) - s.prompt_len).astype(np.float32) for s in samples]
    algorithm = make_algorithm({"name": "opd", "reward_weight": weight})
    per_turn = algorithm.token_advantages(samples, owners, groups, teacher)
    returns = np.array([1.0, 0.0, 0.5])  # GRPO over the group: (R - mean) / (std + eps), per episode
    outcome = (returns - returns.mean()) / (returns.std(ddof=1) + 1e-6)
    episode_of = {id(t): k for k, tr in enumerate(groups[0].trajectories) for t in tr.turns}
    for s, owner, t, turn_adv in zip(samples, owners, teacher, per_turn, strict=True):
        p, mask = s.prompt_len, s.loss_mask[s.prompt_len:]
        expected = np.where(mask, t - s.old_logprobs[p:] + weight * outcome[episode_of[id(owner)]], 0.0)
        np.testing.assert_allclose(s.token_advantages[p:], expected, rtol=1e-5, atol=1e-6)
        assert not s.token_advantages[:p].any() and turn_adv == pytest.approx(expected[mask].mean(), abs=1e-6)
    assert algorithm.last_metrics["teacher_minus_student_abs"] > 0


def test_a_run_without_a_teacher_or_with_a_lone_rollout_and_an_outcome_part_is_refused():
    problems, _ = override_problems(["command=train", "recipe=debug", "algorithm=opd"])
    assert any("learner.teacher.path" in p for p in problems), problems
    problems, _ = override_problems(["command=train", "recipe=debug", "algorithm=opd", "algorithm.reward_weight=1",
                                     "trainer.group_size=1", "learner.teacher.path=/x"])
    assert any("group_size >= 2" in p for p in problems), problems
    with pytest.raises(ConfigError, match="reward_weight"):
        make_algorithm({"name": "opd", "reward_weight": -1.0})


def test_the_privileged_hint_goes_in_after_the_first_user_turn_opening_and_the_response_is_untouched(tiny_tokenizer):
    from agentforge.agent.chat import chat_prompt_ids
    from agentforge.training.privileged import HINT, privileged_samples

    rng = np.random.default_rng(0)
    groups = [Group(task=Task(env="sokoban", seed=7), trajectories=[episode(7, [0.0, 1.0], rng)])]
    prompt = chat_prompt_ids(tiny_tokenizer, [{"role": "system", "content": "Play."},
                                              {"role": "user", "content": "A room."}])
    for turn in groups[0].trajectories[0].turns:
        turn.prompt_ids = list(prompt)
    samples, owners = policy_samples(groups, "opd")
    shown, share = privileged_samples(samples, owners, groups, lambda task: f"moves for seed {task.seed}",
                                      tiny_tokenizer)
    hint = tiny_tokenizer.encode(HINT.format(solution="moves for seed 7"), add_special_tokens=False)
    assert share == 1.0
    for plain, seen in zip(samples, shown, strict=True):
        p, q = plain.prompt_len, seen.prompt_len
        assert q == p + len(hint)
        np.testing.assert_array_equal(seen.input_ids[q:], plain.input_ids[p:])  # the sampled tokens, as sampled
        np.testing.assert_array_equal(seen.loss_mask[q:], plain.loss_mask[p:])
        text = tiny_tokenizer.decode(seen.input_ids[:q])
        assert "<|im_start|>user\n(Known only to you: moves for seed 7.)\nA room." in text
    none, share = privileged_samples(samples, owners, groups, lambda task: None, tiny_tokenizer)
    assert share == 0.0 and all((a.input_ids == b.input_ids).all() for a, b in zip(none, samples, strict=True))


def test_self_distillation_needs_an_env_with_an_expert():
    problems, _ = override_problems(["command=train", "recipe=debug", "algorithm=opd", "algorithm.teacher=self"])
    assert problems == [], problems  # Sokoban has its BFS expert; no teacher folder needed
    problems, _ = override_problems(["command=train", "recipe=debug", "algorithm=opd", "algorithm.teacher=self",
                                     "env=textarena"])
    assert any("has no expert" in p for p in problems), problems


@pytest.mark.parametrize("divergence", ["forward", "reverse", "jsd"])
def test_topk_divergences_equal_a_hand_computation_and_vanish_at_the_teacher(divergence):
    import torch

    from agentforge.objective.distillation import topk_divergence

    rng = np.random.default_rng(3)
    student, teacher = (torch.as_tensor(rng.normal(size=(5, 40)) * 2, dtype=torch.float32) for _ in range(2))
    k, beta, temperature = 6, 0.3, 0.8
    got, mass = topk_divergence(student.clone().requires_grad_(True), teacher, k, divergence, beta, temperature)
    for n in range(5):  # by hand, position by position, in float64
        t, s = teacher[n].double().numpy() / temperature, student[n].double().numpy() / temperature
        top = np.argsort(-t)[:k]
        p = np.exp(t[top] - t[top].max())
        p /= p.sum()
        q = np.exp(s[top] - s[top].max())
        q /= q.sum()
        m = beta * p + (1 - beta) * q
        expected = {"forward": (p * np.log(p / q)).sum(), "reverse": (q * np.log(q / p)).sum(),
                    "jsd": beta * (p * np.log(p / m)).sum() + (1 - beta) * (q * np.log(q / m)).sum()}[divergence]
        assert float(got[n]) == pytest.approx(expected, rel=1e-4, abs=1e-6)
        full = np.exp(t - t.max())
        assert float(mass[n]) == pytest.approx(full[top].sum() / full.sum(), rel=1e-5)
    assert (got > 0).all()
    got.sum().backward()  # the gradient reaches the student's logits
    same, _ = topk_divergence(teacher.clone(), teacher, k, divergence, beta, temperature)
    assert torch.allclose(same, torch.zeros(5), atol=1e-6)
    with pytest.raises(ValueError, match="not one of"):
        topk_divergence(student, teacher, k, "wasserstein")
