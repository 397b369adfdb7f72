"""The reward seam (agentforge/rewards/): the stages as one list from the `reward` group, each episode scored once,
the KL stage's state, the moved keys refused with their new names, and every command's context carrying the stages."""

from __future__ import annotations

import pytest

from agentforge.commands.builders import build_rewards
from agentforge.commands.overrides import override_problems
from agentforge.rewards import REWARD_STAGES, RewardPipeline
from agentforge.schema.compose import compose_config
from agentforge.schema.groups import KLRewardSchema, RewardSchema
from agentforge.types import Task, Trajectory, Turn


def turn(reward: float, valid: bool) -> Turn:
    return Turn(prompt_ids=[1], response_ids=[2], logprobs=[-1.0], forced_mask=[False], response_text="",
                action=None, valid=valid, reward=reward, env_reward=reward, anchor=None, observation="")


def test_the_invalid_action_penalty_scores_each_episode_once():
    pipeline = RewardPipeline.from_settings(RewardSchema(invalid_penalty=0.25))
    episode = Trajectory(task=Task(env="x", seed=0), rollout_index=0, turns=[turn(0.0, False), turn(1.0, True)])
    metrics = pipeline.score_episodes([episode])
    assert [t.reward for t in episode.turns] == [-0.25, 1.0] and [t.env_reward for t in episode.turns] == [0.0, 1.0]
    assert metrics == {"reward/invalid_action/penalised_turns": 1.0, "reward/invalid_action/penalty_per_turn": 0.125}
    pipeline.score_episodes([episode])  # a batch passed again (a resumed run, a replayed group): no second penalty
    assert episode.turns[0].reward == -0.25 and episode.meta["reward_stages"] == ["invalid_action"]


def test_kl_in_the_reward_is_a_stage_only_when_on_and_its_beta_is_checkpointed():
    plain = RewardPipeline.from_settings(RewardSchema())
    assert [s.name for s in plain.stages] == ["invalid_action"] and not plain.needs_reference
    with_kl = RewardPipeline.from_settings(RewardSchema(kl=KLRewardSchema(coef=0.05, target=0.01)))
    assert [s.name for s in with_kl.stages] == ["invalid_action", "kl"] and with_kl.needs_reference
    with_kl.stages[1].value = 0.07
    restored = RewardPipeline.from_settings(RewardSchema(kl=KLRewardSchema(coef=0.05)))
    restored.load_state_dict(with_kl.state_dict())
    assert restored.stages[1].value == 0.07
    assert {"invalid_action", "kl"} <= set(REWARD_STAGES.names())


@pytest.mark.parametrize("override,new", [
    ("agent.invalid_penalty=0", "reward.invalid_penalty"),
    ("learner.loss.kl_in=reward", "reward.kl.coef"),
    ("learner.loss.kl_target=0.01", "reward.kl.target"),
])
def test_a_moved_key_is_refused_naming_where_it_went(override, new):
    problems, _ = override_problems(["command=train", "recipe=debug", override])
    assert any("moved" in p and new in p for p in problems), problems


def test_every_command_plays_with_the_same_stages_and_kl_keeps_the_reference():
    from agentforge.commands.train_checks import learner_config_for_run

    for command in ("train", "eval", "rollout", "rft"):
        cfg = compose_config([f"command={command}", "recipe=debug", "reward.invalid_penalty=0.3"])
        assert build_rewards(cfg).stages[0].penalty == 0.3
    cfg = compose_config(["command=train", "recipe=debug", "reward.kl.coef=0.1"])
    learner = learner_config_for_run(cfg)
    assert learner.needs_reference() and learner.loss.kl_coef == 0.0 and learner.zero_advantage_skippable()
