"""The AgentLoop on real parts: the tiny model in vLLM's CPU engine, Sokoban in local and Ray env pools."""

import pytest

from agentforge.agent.prompts import prompt_for
from agentforge.builders import build_engine, build_model_spec
from agentforge.config import compose_config
from agentforge.engines.interventions import InterventionSpec
from agentforge.envs.pool import LocalEnvPool, RayEnvPool
from agentforge.rollout.metrics import rollout_summary
from agentforge.rollout.multi_turn import AgentConfig, AgentLoop
from agentforge.tasks import TaskSampler
from agentforge.types import SamplingConfig

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


def test_random_tiny_model_turns_are_invalid_noops_with_exact_tokens(engine):
    config = AgentConfig(max_turns=3, sampling=SamplingConfig(max_new_tokens=16))
    pool = LocalEnvPool("sokoban", ENV_OPTIONS)
    loop = AgentLoop(engine, pool, prompt_for("sokoban"), config)
    tasks = TaskSampler("sokoban", "eval").sample(2)
    groups, stats = loop.run(tasks, group_size=2)
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
                    assert turn.reward == pytest.approx(turn.env_reward - config.invalid_penalty)
            prompt_text = engine.tokenizer.decode(first.prompt_ids)
            assert first.observation in prompt_text and "<|im_start|>assistant" in prompt_text
    assert stats.generated_tokens == sum(t.response_tokens for g in groups for t in g.trajectories)


def test_history_window_reaches_the_prompt(engine):
    config = AgentConfig(max_turns=3, history_length=2, sampling=SamplingConfig(max_new_tokens=4))
    loop = AgentLoop(engine, LocalEnvPool("sokoban", ENV_OPTIONS), prompt_for("sokoban"), config)
    groups, _ = loop.run(TaskSampler("sokoban", "eval").sample(1), group_size=1)
    third_prompt = engine.tokenizer.decode(groups[0].trajectories[0].turns[2].prompt_ids)
    assert "[Observation 1]" in third_prompt and "[Observation 2]" in third_prompt
    assert "(invalid" in third_prompt


def test_forced_valid_actions_step_the_env_and_are_masked(engine):
    tokenizer = engine.tokenizer
    config = AgentConfig(max_turns=2, sampling=SamplingConfig(max_new_tokens=40))
    loop = AgentLoop(engine, LocalEnvPool("sokoban", ENV_OPTIONS), prompt_for("sokoban"), config,
                     intervention=forced_response(tokenizer, "left"))
    groups, stats = loop.run(TaskSampler("sokoban", "eval").sample(2), group_size=2)
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
        loop = AgentLoop(engine, pool, prompt_for("sokoban"), AgentConfig(max_turns=2),
                         intervention=forced_response(engine.tokenizer, "up"))
        torch.manual_seed(0)
        groups, stats = loop.run(tasks, group_size=2)
        pool.close()
        results.append(([[(t.anchor, t.reward) for t in tr.turns] for g in groups for tr in g.trajectories],
                        rollout_summary(groups, stats)["success_rate"]))
    assert results[0] == results[1]
