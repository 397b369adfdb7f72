"""The rollout engine's own model as the judge (`reward.judge.endpoint=engine`): the judge's chat goes through the
tokenizer's chat template and the real engine, and an answer without a score (the tiny random model gives none) is
counted as a failed judgment, never a 0."""

from __future__ import annotations

import pytest

from agentforge.engines import make_engine
from agentforge.rewards.judge import JudgeError, make_judge
from agentforge.schema.groups import JudgeRewardSchema
from agentforge.types import Task, Trajectory, Turn


def test_the_engine_judges_through_its_chat_template_and_a_missing_score_is_a_counted_failure(tiny_spec):
    engine = make_engine("hf", tiny_spec, {"dtype": "float32", "batch_size": 2})
    try:
        calls = []
        generate = engine.generate
        engine.generate = lambda prompts, sampling, *a, **k: calls.append((prompts, sampling)) or generate(
            prompts, sampling, *a, **k)
        turns = [Turn(prompt_ids=[1], response_ids=[2], logprobs=[-1.0], forced_mask=[False], response_text="",
                      action="right", valid=True, reward=1.0, env_reward=1.0, anchor="a", observation="a room")]
        kept = Trajectory(task=Task(env="sokoban", seed=0), rollout_index=0, turns=turns)
        settings = JudgeRewardSchema(endpoint="engine", retries=1, max_tokens=6, on_failure="keep_env_reward")
        metrics = make_judge(settings, engine).score_episodes([kept])
        assert len(calls) == 2 and calls[0][1].max_new_tokens == 6  # the first try and one retry
        prompt = engine.tokenizer.decode(calls[0][0][0])
        assert "a strict, fair judge" in prompt and "did: right" in prompt and prompt.rstrip().endswith("assistant")
        assert metrics["judge/failed_episodes"] == 1 and kept.turns[0].reward == 1.0 and kept.meta["judge"] == "failed"
        with pytest.raises(JudgeError, match="no score"):
            make_judge(JudgeRewardSchema(endpoint="engine", retries=0, max_tokens=4), engine).score_episodes(
                [Trajectory(task=Task(env="sokoban", seed=1), rollout_index=0, turns=turns)])
    finally:
        engine.close()
