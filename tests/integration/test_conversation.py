"""Conversation history (`agent.history=conversation`) on real parts: the tiny model in vLLM's CPU engine, Sokoban
in a local pool, the DeepSpeed learner. Each prompt extends the last token for token, the context limit ends an
episode as truncated, a reply cut by max_new_tokens is truncated (not a format error), and a conversation
episode trains with the same loss and gradients whether its turns share execution or are computed apart."""

import numpy as np
import pytest
import torch

from agentforge.agent.chat import chat_prompt_ids, continuation_ids
from agentforge.agent.prompts import prompt_for
from agentforge.agent.render import AgentConfig
from agentforge.commands.builders import build_engine, build_model_spec
from agentforge.engines.interventions import InterventionSpec
from agentforge.errors import ConfigError
from agentforge.hosting.pool import LocalEnvPool
from agentforge.learner import Learner, LearnerConfig, samples_from_groups
from agentforge.learner.packing import pack_micro_batches, padding_stats
from agentforge.rollout.metrics import rollout_summary
from agentforge.rollout.multi_turn import MultiTurnWorkflow
from agentforge.rollout.turns import TRUNCATED
from agentforge.rollout.workflow import RolloutContext
from agentforge.schema.compose import compose_config
from agentforge.tasks import TaskSampler
from agentforge.types import LossRole, SamplingConfig

pytestmark = pytest.mark.integration

ENV_OPTIONS = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 20}
TEMPLATE = prompt_for("sokoban")


@pytest.fixture(scope="module")
def engine():
    cfg = compose_config(["model=tiny", "engine=vllm"])
    engine = build_engine(cfg, build_model_spec(cfg))
    yield engine
    engine.close()


def forced(tokenizer, text: str) -> InterventionSpec:
    ids = tokenizer.encode(text, add_special_tokens=False)
    return InterventionSpec("force_sequence", {"sequence": [*ids, tokenizer.eos_token_id], "after_tokens": 0})


def play(engine, config, tasks=2, group_size=2, intervention=None, env_options=None):
    ctx = RolloutContext(engine, LocalEnvPool("sokoban", env_options or ENV_OPTIONS), TEMPLATE, config, intervention)
    result = MultiTurnWorkflow().run(ctx, TaskSampler("sokoban", "eval").sample(tasks), group_size)
    return result.groups, result.stats


def conversation(max_turns=3, max_new_tokens=8, **kw) -> AgentConfig:
    return AgentConfig(history="conversation", max_turns=max_turns,
                       sampling=SamplingConfig(max_new_tokens=max_new_tokens), **kw)


@pytest.mark.parametrize("schedule", ["lockstep", "per_episode"])
def test_each_prompt_is_the_last_prompt_its_sampled_ids_and_the_envs_reply(engine, schedule):
    tokenizer = engine.tokenizer
    text = "<think>go</think><action>right</action>"
    groups, _ = play(engine, conversation(schedule=schedule, max_new_tokens=40), intervention=forced(tokenizer, text))
    trajectories = [t for g in groups for t in g.trajectories]
    assert any(t.length >= 2 for t in trajectories)
    for trajectory in trajectories:
        turns = trajectory.turns
        for before, after in zip(turns, turns[1:], strict=False):
            head = [*before.prompt_ids, *before.response_ids]
            assert after.prompt_ids[: len(head)] == head  # an exact extension: nothing before is encoded again
            reply = tokenizer.decode(after.prompt_ids[len(head):])
            assert reply.startswith("\n<|im_start|>user\n") and reply.endswith("<|im_start|>assistant\n")
            assert after.observation in reply and "(the conversation above)" in reply
        # the responses decode to clean text here, so the conversation is what the chat template itself renders
        messages = TEMPLATE.messages(_obs(turns[0]), [], 1)
        assert chat_prompt_ids(tokenizer, messages) == turns[0].prompt_ids
        for turn in turns[1:]:
            reply_text = tokenizer.decode(turn.prompt_ids).rsplit("<|im_start|>user\n", 1)[1]
            messages += [{"role": "assistant", "content": text},
                         {"role": "user", "content": reply_text.split("<|im_end|>")[0]}]
        assert chat_prompt_ids(tokenizer, messages) == turns[-1].prompt_ids


def _obs(turn):
    from agentforge.types import Observation

    return Observation(turn.observation, turn.anchor, ["up", "down", "left", "right"])


def test_a_reply_cut_by_max_new_tokens_is_truncated_not_a_format_error(engine):
    groups, _ = play(engine, conversation(max_new_tokens=4), tasks=1)
    stats_groups = groups
    for trajectory in (t for g in groups for t in g.trajectories):
        for before, after in zip(trajectory.turns, trajectory.turns[1:], strict=False):
            assert len(before.response_ids) == 4 and before.info["truncated"]
            assert before.info["parse_error"] == TRUNCATED and not before.valid
            reply = engine.tokenizer.decode(after.prompt_ids[len(before.prompt_ids) + 4:])
            assert reply.startswith("<|im_end|>\n<|im_start|>user\n")  # the block closed for the cut response
            assert "Your last reply gave no action" in reply and "truncated" in reply
    summary = rollout_summary(stats_groups, _stats(groups))
    assert summary["truncated_turn_rate"] == 1.0


def _stats(groups):
    from agentforge.rollout.workflow import RolloutStats

    return RolloutStats(turns=sum(t.length for g in groups for t in g.trajectories))


def test_the_context_limit_ends_the_episode_as_truncated(engine):
    tokenizer = engine.tokenizer
    first = TaskSampler("sokoban", "eval").sample(1)
    pool = LocalEnvPool("sokoban", ENV_OPTIONS)
    observation = pool.reset(first)[0]
    pool.close()
    first_prompt = chat_prompt_ids(tokenizer, TEMPLATE.messages(observation, [], 1))
    reply = continuation_ids(tokenizer, [tokenizer.eos_token_id], TEMPLATE.reply(observation, [], 2))
    limit = len(first_prompt) + 8 + len(reply) // 2  # the first turn fits; the second never does
    groups, stats = play(engine, conversation(max_turns=4, max_prompt_tokens=limit), tasks=1)
    for trajectory in (t for g in groups for t in g.trajectories):
        assert trajectory.length == 1 and trajectory.meta["truncated"] == "context_limit"
        assert trajectory.meta["next_prompt_tokens"] > limit
    assert stats.context_limit_ends == 2
    assert rollout_summary(groups, stats)["context_limit_rate"] == 1.0
    with pytest.raises(ConfigError, match="history mode"):
        AgentConfig(history="everything")


def test_a_conversation_trains_the_same_with_shared_execution(engine, tiny_model_dir):
    """The episode's turns as per-turn samples (each its own forward: `learner.sharing=none`) vs the learner's shared
    execution (`sharing=prefix`: an episode's turns run as one sequence): the same log-probs, loss, gradient norm
    and update, for the tokens of one sequence per episode instead of one per turn."""
    groups, _ = play(engine, conversation(max_turns=3, max_new_tokens=6), tasks=1, group_size=2)
    trajectories = [t for g in groups for t in g.trajectories]
    n_turns = sum(t.length for t in trajectories)
    advantages = np.random.default_rng(0).normal(size=n_turns)
    samples = samples_from_groups(groups, advantages)
    assert len(samples) == n_turns == 6
    for a, b in zip(samples, samples[1:], strict=False):  # within an episode each sample extends the last
        if b.prompt_len > a.length:
            assert (b.input_ids[: a.length] == a.input_ids).all()
    shared = padding_stats(samples, pack_micro_batches(samples, 4096, "prefix"), "prefix")
    apart = padding_stats(samples, pack_micro_batches(samples, 4096, "none"), "none")
    one_sequence_each = sum(len(t.turns[-1].prompt_ids) + len(t.turns[-1].response_ids) for t in trajectories)
    assert apart["row_tokens"] == sum(s.length for s in samples)
    assert shared["row_tokens"] <= one_sequence_each < apart["row_tokens"]
    results = {}
    for sharing in ("prefix", "none"):
        batch = [type(s)(s.input_ids.copy(), s.loss_mask.copy(), s.old_logprobs.copy(), s.advantage, s.prompt_len)
                 for s in samples]
        config = LearnerConfig.from_mapping({"lr": 1e-3, "micro_batch_tokens": 4096, "sharing": sharing})
        with Learner(str(tiny_model_dir), config, in_process=True) as learner:
            for sample, logp in zip(batch, learner.compute_logprobs(batch), strict=True):
                sample.old_logprobs[sample.prompt_len:] = logp
            metrics = learner.step(batch)
            results[sharing] = ([s.old_logprobs.copy() for s in batch], metrics, dict(learner.export_weights()))
    for a, b in zip(results["prefix"][0], results["none"][0], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert results["prefix"][1]["loss"] == pytest.approx(results["none"][1]["loss"], abs=1e-6)
    assert results["prefix"][1]["grad_norm"] == pytest.approx(results["none"][1]["grad_norm"], rel=1e-4)
    assert results["prefix"][1]["grad_norm"] > 0
    for name, tensor in results["none"][2].items():
        diff = (results["prefix"][2][name] - tensor).abs()
        assert int((diff > 1e-5).sum()) <= max(1, tensor.numel() // 2000), name
    assert torch.is_tensor(next(iter(results["prefix"][2].values())))


def test_expert_warm_start_data_has_the_conversation_format(engine):
    """SFT data in conversation mode is built the way rollouts build prompts: each turn extends the last."""
    from agentforge.envs.base import expert_for
    from agentforge.envs.sokoban import SokobanEnv
    from agentforge.training.sft import expert_trajectory

    task = TaskSampler("sokoban", "train").sample(1)[0]
    actions = expert_for("sokoban")(task, ENV_OPTIONS)
    trajectory = expert_trajectory(task, actions, SokobanEnv(**ENV_OPTIONS), TEMPLATE, engine.tokenizer,
                                   conversation(max_turns=20))
    assert trajectory.won and trajectory.length == len(actions) >= 2
    for before, after in zip(trajectory.turns, trajectory.turns[1:], strict=False):
        head = [*before.prompt_ids, *before.response_ids]
        assert after.prompt_ids[: len(head)] == head and after.observation in engine.tokenizer.decode(after.prompt_ids)


@pytest.mark.parametrize("schedule", ["lockstep", "per_episode"])
def test_an_observation_that_outgrows_the_prompt_budget_ends_its_episode_not_the_run(engine, schedule):
    """History window, no history shown: search QA's observation grows with the passages a search returns. A later
    turn whose prompt cannot fit ends the episode as truncated (the conversation mode's policy); a first prompt that
    cannot fit is still a config error."""
    from agentforge.errors import PromptTooLongError

    tokenizer, template = engine.tokenizer, prompt_for("search_qa")
    tasks = TaskSampler("search_qa", "eval").sample(1)
    pool = LocalEnvPool("search_qa", {})
    first = chat_prompt_ids(tokenizer, template.messages(pool.reset(tasks)[0], [], 1))
    pool.close()
    config = AgentConfig(max_turns=3, history_length=0, max_prompt_tokens=len(first) + 8, schedule=schedule,
                         sampling=SamplingConfig(max_new_tokens=24))
    ctx = RolloutContext(engine, LocalEnvPool("search_qa", {}), template, config,
                         forced(tokenizer, "<think>go</think><search>the</search>"))
    result = MultiTurnWorkflow().run(ctx, tasks, 2)
    for trajectory in result.groups[0].trajectories:
        assert trajectory.length == 1 and trajectory.turns[0].action == "search[the]"
        assert trajectory.meta["truncated"] == "context_limit"
        assert trajectory.meta["next_prompt_tokens"] > len(first) + 8
    assert result.stats.context_limit_ends == 2
    assert rollout_summary(result.groups, result.stats)["context_limit_rate"] == 1.0
    tight = AgentConfig(max_turns=3, history_length=0, max_prompt_tokens=len(first) - 1, schedule=schedule)
    with pytest.raises(PromptTooLongError, match="tokens without history, over agent.max_prompt_tokens"):
        MultiTurnWorkflow().run(RolloutContext(engine, LocalEnvPool("search_qa", {}), template, tight), tasks, 1)


def test_a_summarising_episode_outlives_its_context_budget_token_exact(engine):
    """`agent.history=summary`: an episode longer than the model's context window (engine.max_model_len) plays all its
    turns under a 700-token prompt budget that a plain conversation outgrows after a few; each summary is the
    policy's own sampled ids, spliced into the next prompt as they are, and trains with the advantage of the turn
    after it."""
    tokenizer = engine.tokenizer
    text = "<think>go</think><action>left</action>"
    budget, turns = 700, 72
    long_room = {**ENV_OPTIONS, "max_steps": turns + 5}
    kw = dict(max_turns=turns, max_new_tokens=40, max_prompt_tokens=budget)
    plain_groups, _ = play(engine, conversation(**kw), tasks=1, intervention=forced(tokenizer, text),
                           env_options=long_room)
    plain = [t for g in plain_groups for t in g.trajectories]
    assert all(t.meta.get("truncated") == "context_limit" and t.length < 8 for t in plain)  # the budget binds

    summarising = AgentConfig(history="summary", max_turns=turns, max_prompt_tokens=budget,
                              sampling=SamplingConfig(max_new_tokens=40),
                              summary={"trigger": 0.7, "max_tokens": 24})
    groups, stats = play(engine, summarising, tasks=1, intervention=forced(tokenizer, text), env_options=long_room)
    trajectories = [t for g in groups for t in g.trajectories]
    for trajectory in trajectories:
        assert trajectory.length == turns and "truncated" not in trajectory.meta  # every turn played
        # what the episode read and wrote (every observation, every response) is more than the model's window
        read_and_written = sum(len(t.response_ids) + len(tokenizer.encode(t.observation)) for t in trajectory.turns)
        assert read_and_written > engine.max_model_len
        assert all(len(turn.prompt_ids) <= budget for turn in trajectory.turns)
        summaries = [s for s in trajectory.spans if s.kind == "summary"]
        assert summaries and all(s.role == LossRole.SUMMARY for s in summaries)
        for span in summaries:
            before = trajectory.turns[span.turn_index - 1]
            head = [*before.prompt_ids, *before.response_ids]
            assert span.prompt_ids[: len(head)] == head  # the request extends the conversation
            assert "Write only the summary." in tokenizer.decode(span.prompt_ids[len(head):])
            after = trajectory.turns[span.turn_index].prompt_ids
            ids = list(span.response_ids)
            if ids and ids[-1] in set(tokenizer.all_special_ids):
                ids = ids[:-1]
            starts = [i for i in range(len(after) - len(ids) + 1) if after[i: i + len(ids)] == ids]
            assert ids and starts, "the summary's sampled ids are in the next prompt as they are"
            assert len(after) < len(span.prompt_ids)  # the fresh prompt is shorter than the conversation was
    metrics = rollout_summary(groups, stats)
    assert metrics["summaries_per_episode"] >= 1 and metrics["summarised_episode_rate"] == 1.0
    assert budget * 0.7 < metrics["summary_at_tokens"] <= budget
    assert stats.extra_generations == sum(len([s for s in t.spans if s.kind == "summary"]) for t in trajectories)
    # trained with the advantage of the turn after it (any per-turn algorithm)
    advantages = np.arange(sum(t.length for t in trajectories), dtype=float)
    samples = samples_from_groups(groups, advantages)
    offsets = np.cumsum([0] + [t.length for t in trajectories])
    expected = sorted(float(advantages[offsets[j] + s.turn_index]) for j, t in enumerate(trajectories)
                      for s in t.spans if s.kind == "summary")
    trained = sorted(s.advantage for s in samples if any(
        tuple(s.input_ids[: s.prompt_len]) == tuple(span.prompt_ids) for t in trajectories for span in t.spans))
    assert trained == expected
    masked = AgentConfig(history="summary", max_turns=8, max_prompt_tokens=budget,
                         sampling=SamplingConfig(max_new_tokens=40), summary={"trigger": 0.7, "max_tokens": 24,
                                                                              "train": False})
    groups, _ = play(engine, masked, tasks=1, intervention=forced(tokenizer, text))
    assert {s.role for g in groups for t in g.trajectories for s in t.spans} == {LossRole.NOT_TRAINED}
    with pytest.raises(ConfigError, match="schedule=lockstep"):
        AgentConfig(history="summary", schedule="per_episode")
