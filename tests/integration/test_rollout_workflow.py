"""The default multi-turn rollout workflow and its hooks on real parts: the tiny model in vLLM's CPU engine, Sokoban
in local and Ray env pools."""

import numpy as np
import pytest

from agentforge.agent.chat import chat_prompt_ids
from agentforge.agent.prompts import prompt_for
from agentforge.agent.render import AgentConfig
from agentforge.commands.builders import build_engine, build_model_spec
from agentforge.engines.interventions import InterventionSpec
from agentforge.errors import AgentforgeError
from agentforge.hosting.pool import LocalEnvPool, RayEnvPool
from agentforge.learner import samples_from_groups
from agentforge.rewards import RewardPipeline
from agentforge.rollout.hooks import RolloutHooks
from agentforge.rollout.metrics import rollout_summary
from agentforge.rollout.multi_turn import MultiTurnWorkflow
from agentforge.rollout.workflow import EpisodePlan, RolloutContext
from agentforge.schema.compose import compose_config
from agentforge.schema.groups import RewardSchema
from agentforge.tasks import TaskSampler
from agentforge.types import LossRole, SamplingConfig, Span

pytestmark = pytest.mark.integration

ENV_OPTIONS = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 20}


@pytest.fixture(scope="module")
def engine():
    cfg = compose_config(["model=tiny", "engine=vllm"])
    engine = build_engine(cfg, build_model_spec(cfg))
    yield engine
    engine.close()


def forced_response(tokenizer, action: str) -> InterventionSpec:
    """Force a whole well-formed response from the first token on (then EOS), so the loop sees valid actions."""
    ids = tokenizer.encode(f"<think>go</think><action>{action}</action>", add_special_tokens=False)
    return InterventionSpec("force_sequence", {"sequence": [*ids, tokenizer.eos_token_id], "after_tokens": 0})


def play(engine, pool, config, tasks, group_size, intervention=None, hooks=None):
    rewards = RewardPipeline.from_settings(RewardSchema())  # the default stages: the invalid-action penalty 0.1
    ctx = RolloutContext(engine, pool, prompt_for("sokoban"), config, intervention, rewards=rewards)
    result = MultiTurnWorkflow(hooks).run(ctx, tasks, group_size)
    return result.groups, result.stats


def test_random_tiny_model_turns_are_invalid_noops_with_exact_tokens(engine):
    config = AgentConfig(max_turns=3, sampling=SamplingConfig(max_new_tokens=16))
    pool = LocalEnvPool("sokoban", ENV_OPTIONS)
    tasks = TaskSampler("sokoban", "eval").sample(2)
    groups, stats = play(engine, pool, config, tasks, group_size=2)
    assert [g.task for g in groups] == tasks and all(len(g.trajectories) == 2 for g in groups)
    for group in groups:
        for trajectory in group.trajectories:
            assert trajectory.length == 3  # never done: random tokens are no valid action
            first = trajectory.turns[0]
            for turn in trajectory.turns:
                assert len(turn.response_ids) == len(turn.logprobs) == len(turn.forced_mask) > 0
                assert all(lp <= 0.0 for lp in turn.logprobs)
                assert turn.anchor == first.anchor  # no-op: the state never changes
                if not turn.valid:
                    assert turn.reward == pytest.approx(turn.env_reward - 0.1)
            prompt_text = engine.tokenizer.decode(first.prompt_ids)
            assert first.observation in prompt_text and "<|im_start|>assistant" in prompt_text
    assert stats.generated_tokens == sum(t.response_tokens for g in groups for t in g.trajectories)


def test_history_window_reaches_the_prompt(engine):
    config = AgentConfig(max_turns=3, history_length=2, sampling=SamplingConfig(max_new_tokens=4))
    groups, _ = play(engine, LocalEnvPool("sokoban", ENV_OPTIONS), config, TaskSampler("sokoban", "eval").sample(1), 1)
    third_prompt = engine.tokenizer.decode(groups[0].trajectories[0].turns[2].prompt_ids)
    assert "[Observation 1]" in third_prompt and "[Observation 2]" in third_prompt
    assert "(invalid" in third_prompt


def test_forced_valid_actions_step_the_env_and_are_masked(engine):
    tokenizer = engine.tokenizer
    config = AgentConfig(max_turns=2, sampling=SamplingConfig(max_new_tokens=40))
    groups, stats = play(engine, LocalEnvPool("sokoban", ENV_OPTIONS), config, TaskSampler("sokoban", "eval").sample(2),
                         2, intervention=forced_response(tokenizer, "left"))
    for trajectory in (t for g in groups for t in g.trajectories):
        for turn in trajectory.turns:
            assert turn.valid and turn.action == "left" and turn.info["executed"]
            assert all(turn.forced_mask)
            assert turn.env_reward == pytest.approx(-0.1) or turn.env_reward > 0  # gym-sokoban's step penalty
    assert stats.env_steps == sum(t.length for g in groups for t in g.trajectories)


def test_ray_pool_matches_local_pool(engine):
    import torch

    tasks = TaskSampler("sokoban", "eval").sample(2)
    results = []
    for pool in (LocalEnvPool("sokoban", ENV_OPTIONS), RayEnvPool("sokoban", ENV_OPTIONS, num_workers=2)):
        torch.manual_seed(0)
        groups, stats = play(engine, pool, AgentConfig(max_turns=2), tasks, 2,
                             intervention=forced_response(engine.tokenizer, "up"))
        pool.close()
        results.append(([[(t.anchor, t.reward) for t in tr.turns] for g in groups for tr in g.trajectories],
                        rollout_summary(groups, stats)["success_rate"]))
    assert results[0] == results[1]


class StrategyFirst(RolloutHooks):
    """A StraTA-shaped hook: one extra generation per episode before turn 1, kept as a trained strategy span and
    shown in every turn prompt; a not-trained judgment after the episode; every first attempt at turn 1 rejected."""

    name = "strategy-first"

    def __init__(self):
        self.after_called = 0
        self.reviews: list[int] = []

    def before_first_turn(self, episodes, ctx):
        prompts = [chat_prompt_ids(ctx.tokenizer, [{"role": "user", "content": f"Plan for: {e.observation.text}"}])
                   for e in episodes]
        for episode, prompt, completion in zip(episodes, prompts, ctx.generate(prompts, extra=True), strict=True):
            episode.trajectory.spans.append(Span.from_completion(completion, prompt, LossRole.STRATEGY, "strategy"))
            episode.notes.append("STRATEGY-NOTE: push the box right")

    def review_turns(self, episodes, completions, attempt, ctx):
        self.reviews.append(attempt)
        first_turn = [len(e.trajectory.turns) == 0 for e in episodes]
        return [not (turn0 and attempt == 0) for turn0 in first_turn]

    def after_episodes(self, episodes, ctx):
        self.after_called += 1
        prompts = [e.trajectory.turns[-1].prompt_ids for e in episodes]
        for episode, prompt, completion in zip(episodes, prompts, ctx.generate(prompts, extra=True), strict=True):
            episode.trajectory.spans.append(Span.from_completion(completion, prompt, LossRole.NOT_TRAINED, "judgment"))

    def metrics(self):
        return {"strategy_first/reviews": float(len(self.reviews))}


def test_hooks_add_spans_notes_regenerations_and_metrics(engine):
    hooks = StrategyFirst()
    config = AgentConfig(max_turns=2, sampling=SamplingConfig(max_new_tokens=8))
    ctx = RolloutContext(engine, LocalEnvPool("sokoban", ENV_OPTIONS), prompt_for("sokoban"), config)
    result = MultiTurnWorkflow(hooks).run(ctx, TaskSampler("sokoban", "eval").sample(2), 2)
    trajectories = [t for g in result.groups for t in g.trajectories]
    assert hooks.after_called == 1 and hooks.reviews == [0, 1, 0]  # turn 1: rejected once, then kept; turn 2: kept
    for trajectory in trajectories:
        kinds = [(s.kind, s.role) for s in trajectory.spans]
        assert kinds == [("strategy", LossRole.STRATEGY), ("discarded_turn", LossRole.NOT_TRAINED),
                         ("judgment", LossRole.NOT_TRAINED)]
        discarded = trajectory.spans[1]
        assert discarded.turn_index == 0 and discarded.prompt_ids == trajectory.turns[0].prompt_ids
        assert all("STRATEGY-NOTE" in engine.tokenizer.decode(t.prompt_ids) for t in trajectory.turns)
        assert all(t.role is LossRole.ACTION for t in trajectory.turns)
    stats = result.stats
    assert stats.regenerated_turns == 4 and stats.extra_generations == 8
    generated = sum(t.response_tokens + sum(len(s.response_ids) for s in t.spans) for t in trajectories)
    assert stats.generated_tokens == generated
    summary = rollout_summary(result.groups, stats, result.metrics)
    assert summary["regenerated_turns"] == 4 and summary["strategy_first/reviews"] == 3.0
    # the learner trains what the roles say: turns and the strategy span, never a judgment or a discarded turn
    advantages = np.ones(sum(t.length for t in trajectories))
    with pytest.raises(AgentforgeError, match="no advantages for them"):
        samples_from_groups(result.groups, advantages, algorithm="algorithm 'strategy-first'")
    samples = samples_from_groups(result.groups, advantages, np.full(len(trajectories), 2.0))
    strategy_samples = [s for s in samples if s.advantage == 2.0]
    assert len(strategy_samples) == len(trajectories) and len(samples) == len(trajectories) * 3


def test_a_hook_that_never_accepts_is_stopped(engine):
    class Never(RolloutHooks):
        name = "never"

        def review_turns(self, episodes, completions, attempt, ctx):
            return [False] * len(episodes)

    ctx = RolloutContext(engine, LocalEnvPool("sokoban", ENV_OPTIONS), prompt_for("sokoban"),
                         AgentConfig(max_turns=1, sampling=SamplingConfig(max_new_tokens=2)))
    with pytest.raises(AgentforgeError, match="hooks 'never' rejected turn 1"):
        MultiTurnWorkflow(Never()).run(ctx, TaskSampler("sokoban", "eval").sample(1), 1)


def test_plain_hooks_reproduce_the_default_play(engine):
    tasks = TaskSampler("sokoban", "eval").sample(2)
    runs = []
    for hooks in (None, RolloutHooks()):
        engine.reseed(3)
        groups, _ = play(engine, LocalEnvPool("sokoban", ENV_OPTIONS), AgentConfig(max_turns=2), tasks, 2, hooks=hooks)
        runs.append([(t.prompt_ids, t.response_ids) for g in groups for tr in g.trajectories for t in tr.turns])
    assert runs[0] == runs[1]


class BranchFromExpert(RolloutHooks):
    """Every episode starts after the first two moves of the BFS expert (branching from a mid-episode state)."""

    name = "branch"

    def __init__(self, prefixes):
        self.prefixes = prefixes

    def plan(self, tasks, group_size):
        return [EpisodePlan(task, i, g, prefix=tuple(self.prefixes[g])) for g, task in enumerate(tasks)
                for i in range(group_size)]


def test_branching_episodes_start_after_their_replayed_prefix(engine):
    from agentforge.envs.replay import replay
    from agentforge.envs.sokoban import SokobanEnv
    from agentforge.envs.sokoban_solver import expert_actions

    solved = [(task, expert_actions(task, ENV_OPTIONS)) for task in TaskSampler("sokoban", "eval").sample(12)]
    longer = [(task, actions) for task, actions in solved if actions and len(actions) >= 4][:2]
    tasks, prefixes = [task for task, _ in longer], [actions[:2] for _, actions in longer]
    config = AgentConfig(max_turns=2, history_length=2, sampling=SamplingConfig(max_new_tokens=8))
    for pool in (LocalEnvPool("sokoban", ENV_OPTIONS), RayEnvPool("sokoban", ENV_OPTIONS, num_workers=2)):
        ctx = RolloutContext(engine, pool, prompt_for("sokoban"), config)
        result = MultiTurnWorkflow(BranchFromExpert(prefixes)).run(ctx, tasks, 2)
        pool.close()
        for task, prefix, group in zip(tasks, prefixes, result.groups, strict=True):
            expected = replay(SokobanEnv(**ENV_OPTIONS), task, prefix)
            for trajectory in group.trajectories:
                assert trajectory.meta["prefix"] == prefix
                first = trajectory.turns[0]
                assert first.anchor == expected.observation.anchor  # the state after the prefix
                shown = engine.tokenizer.decode(first.prompt_ids)
                assert f"[Your action 1] {prefix[0]}" in shown and f"[Your action 2] {prefix[1]}" in shown
        assert result.stats.env_steps >= 2 * 2 * len(prefixes[0])
