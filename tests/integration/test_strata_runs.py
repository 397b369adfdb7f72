"""StraTA end to end on real parts: the tiny model in vLLM's CPU engine, real Sokoban, the real all-MiniLM-L6-v2
embedding model; a workflow run checked span by span, and one training iteration through the trainer."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from test_sweep_report import run_cli

from agentforge.agent.prompts import prompt_for
from agentforge.agent.render import AgentConfig
from agentforge.algorithms import make_algorithm
from agentforge.algorithms.strata import strata_levels
from agentforge.algorithms.strategy_selection import StrategyEmbedder, farthest_point_selection
from agentforge.commands.builders import build_engine, build_model_spec
from agentforge.hosting.pool import LocalEnvPool
from agentforge.learner import samples_from_groups
from agentforge.rollout.workflow import RolloutContext
from agentforge.schema.compose import compose_config
from agentforge.tasks import TaskSampler
from agentforge.types import LossRole, SamplingConfig
from tests.conftest import TINY_TRAIN

pytestmark = pytest.mark.integration

ENV_OPTIONS = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 20}
# the trainer and `agentforge eval` runs: short enough for the tiny model's prompts
SMALL_STRATA = ("trainer.warm_start=false", "agent.sampling.max_new_tokens=16", "algorithm.strategy_max_tokens=16",
                "algorithm.judge_max_tokens=8")
OPTIONS = {"name": "strata", "num_strategies": 2, "rollouts_per_strategy": 2, "sigma": 2, "strategy_max_tokens": 12,
           "judge_max_tokens": 10}


@pytest.fixture(scope="module")
def engine():
    cfg = compose_config(["model=tiny", "engine=vllm"])
    engine = build_engine(cfg, build_model_spec(cfg))
    yield engine
    engine.close()


def test_real_embedding_model_separates_strategies():
    embedder = StrategyEmbedder()
    texts = ["Push the box right twice, then up.", "Push the box right two times and then up.",
             "Search the fridge for the apple and heat it in the microwave.", "Push the box to the right, then up."]
    embeddings = embedder.encode(texts)
    assert embeddings.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
    chosen = farthest_point_selection(embeddings, 2)
    assert 2 in chosen  # the odd one out is picked second (or first)


def test_a_strata_rollout_records_strategies_judgments_and_trains_by_role(engine):
    algorithm = make_algorithm(OPTIONS)
    config = AgentConfig(max_turns=2, history_length=1, sampling=SamplingConfig(max_new_tokens=8))
    ctx = RolloutContext(engine, LocalEnvPool("sokoban", ENV_OPTIONS), prompt_for("sokoban"), config)
    tasks = TaskSampler("sokoban", "eval").sample(2)
    result = algorithm.workflow("train").run(ctx, tasks, 4)
    tokenizer = engine.tokenizer

    assert [g.task for g in result.groups] == tasks
    for group in result.groups:
        trajectories = group.trajectories
        assert [(t.meta["strategy_index"], t.meta["strategy_rollout"]) for t in trajectories] == [
            (0, 0), (0, 1), (1, 0), (1, 1)]
        by_strategy = defaultdict(list)
        for t in trajectories:
            by_strategy[t.meta["strategy_index"]].append(t)
        candidates = set()
        for members in by_strategy.values():
            assert len({t.meta["strategy"] for t in members}) == 1  # z is fixed across the strategy's M rollouts
            spans = [s for t in members for s in t.spans if s.kind == "strategy"]
            assert len(spans) == 1 and members[0].spans[0] is spans[0]  # trained once, on the first rollout
            span = spans[0]
            assert span.role is LossRole.STRATEGY and span.info["token_limit"] == 12
            assert 0 < len(span.response_ids) == len(span.logprobs) <= 12 and all(lp <= 0 for lp in span.logprobs)
            assert not any(span.forced_mask)
            if len(span.response_ids) < 12:
                assert not span.info["truncated"]  # only a strategy cut at its budget is marked truncated
            prompt = tokenizer.decode(span.prompt_ids)
            assert "global strategy" in prompt and members[0].turns[0].observation in prompt
            candidates.add(span.info["candidate"])
            for t in members:
                for turn in t.turns:  # the strategy is on top of every action prompt
                    shown = tokenizer.decode(turn.prompt_ids)
                    assert "Your strategy for this episode" in shown
                    assert " ".join(t.meta["strategy"].split()[:3]) in " ".join(shown.split())
        assert len(candidates) == 2  # two different candidates of the four were selected
        for t in trajectories:
            judgments = [s for s in t.spans if s.kind == "judgment"]
            assert len(judgments) == 1 and judgments[0].role is LossRole.NOT_TRAINED
            assert "The agent committed to this strategy" in tokenizer.decode(judgments[0].prompt_ids)
            assert t.meta["judgment"] in ("ok", "unparseable") and isinstance(t.meta["flagged_steps"], list)

    stats, metrics = result.stats, result.metrics
    episodes = 8
    assert stats.extra_generations == 2 * 4 + episodes  # σ·N candidates per task + one judgment per episode
    trajectories = [t for g in result.groups for t in g.trajectories]
    span_tokens = sum(len(s.response_ids) for t in trajectories for s in t.spans)
    unselected = stats.generated_tokens - span_tokens - sum(t.response_tokens for t in trajectories)
    assert unselected >= 4  # the 4 candidates that were not kept were generated too
    assert metrics["strata/strategies"] == 4 and metrics["strata/strategy_candidates"] == 8
    assert metrics["strata/judged_episodes"] == episodes
    assert 0 <= metrics["strata/judgment_flag_rate"] <= 1 and "strata/judgment_parse_failures" in metrics
    assert -1 <= metrics["strata/strategy_cosine_chosen"] <= 1 and "strata/selection_ms_per_task" in metrics

    # advantages and what the learner trains: every turn and each strategy once; never a judgment
    advantages = algorithm.advantages(result.groups)
    span_advantages = algorithm.span_advantages(result.groups)
    assert len(advantages) == sum(t.length for t in trajectories) and len(span_advantages) == 4
    samples = samples_from_groups(result.groups, advantages, span_advantages, "algorithm 'strata'")
    strategy_spans = [s for t in trajectories for s in t.spans if s.role is LossRole.STRATEGY]
    assert len(samples) == sum(t.length for t in trajectories) + len(strategy_spans)
    judgment_prompts = {tuple(s.prompt_ids) for t in trajectories for s in t.spans if s.kind == "judgment"}
    for sample in samples:
        assert tuple(sample.input_ids[: sample.prompt_len]) not in judgment_prompts
        assert sample.num_loss_tokens == len(sample.response_ids)  # nothing forced: every sampled token trains
    for span, sample in zip(strategy_spans, samples[-len(strategy_spans):], strict=True):
        assert list(sample.input_ids) == span.prompt_ids + span.response_ids
        np.testing.assert_allclose(sample.old_logprobs[sample.prompt_len:], span.logprobs, rtol=1e-6)
    # group-relative at both levels: each action group and each task's strategies sum to zero
    flat = iter(advantages)
    for group in result.groups:
        per_strategy = defaultdict(float)
        for t in group.trajectories:
            for _ in t.turns:
                per_strategy[t.meta["strategy_index"]] += next(flat)
        assert all(abs(v) < 1e-6 for v in per_strategy.values())
    assert abs(span_advantages[:2].sum()) < 1e-6 and abs(span_advantages[2:].sum()) < 1e-6

    # the same real trajectories with outcomes set by hand: the winning strategy and rollout get the credit
    first = result.groups[0].trajectories
    first[0].won = True
    cfg = make_algorithm({**OPTIONS, "length_penalty": False, "format_penalty": 0.0}).config
    levels = strata_levels(result.groups, cfg, judgment=False)
    assert levels.strategy_advantages[0] > 0 > levels.strategy_advantages[1]
    assert algorithm.last_metrics["strategy_format_term_mean"] <= 0 and "action_judgment_term_mean" in (
        algorithm.last_metrics)
    n0, n1 = first[0].length, first[1].length
    assert (levels.action_advantages[:n0] > 0).all() and (levels.action_advantages[n0:n0 + n1] < 0).all()


def test_eval_hooks_give_every_episode_its_own_strategy_and_no_judgment(engine):
    from agentforge.agent.strategy import NO_STRATEGY

    algorithm = make_algorithm({**OPTIONS, "strategy_tag_required": False})
    config = AgentConfig(max_turns=1, sampling=SamplingConfig(max_new_tokens=4))
    ctx = RolloutContext(engine, LocalEnvPool("sokoban", ENV_OPTIONS), prompt_for("sokoban"), config)
    result = algorithm.workflow("eval").run(ctx, TaskSampler("sokoban", "eval").sample(1), 3)
    trajectories = result.groups[0].trajectories
    assert [t.meta["strategy_index"] for t in trajectories] == [0, 1, 2]
    assert all([s.kind for s in t.spans] == ["strategy"] for t in trajectories)
    assert result.stats.extra_generations == 3 and "strata/judged_episodes" not in result.metrics
    assert result.metrics["strata/strategy_cosine_chosen"] == result.metrics["strata/strategy_cosine_candidates"]
    for t in trajectories:  # without the tag requirement any non-empty text is a well-formed strategy
        assert t.spans[0].info["format_ok"] == (t.meta["strategy"] != NO_STRATEGY)


def test_one_training_iteration_of_the_sokoban_recipe(tmp_path, tiny_train_config):
    from agentforge.commands.train import build_trainer
    from agentforge.tracking.tracker import read_metrics

    build_trainer(tiny_train_config("strata_sokoban", *SMALL_STRATA, "trainer.checkpoint_every=1")).fit()
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    row = next(r for r in rows if r["iteration"] == 1)
    for key in ("train/loss", "train/strata/judgment_flag_rate", "train/strata/judgment_parse_failures",
                "train/strata/strategy_tokens_mean", "train/strata/strategy_cosine_chosen",
                "train/strata/strategy_cosine_candidates", "adv/strategy_reward_mean", "adv/action_reward_mean",
                "adv/strategy_adv_abs_mean", "adv/action_adv_abs_mean", "eval/strata/strategies"):
        assert key in row, key
    assert row["train/samples"] >= 2 * 2  # at least the 2 tasks' 2 strategies
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    trajectory = samples[0]  # the first rollout of the first strategy of the first task
    assert "strategy" in trajectory["meta"] and "flagged_steps" in trajectory["meta"]
    assert [s["kind"] for s in trajectory["spans"]] == ["strategy", "judgment"]

    # `agentforge eval` on the run's checkpoint: every episode writes its own strategy first, nothing is judged
    out = tmp_path / "eval"
    tiny = [o for o in TINY_TRAIN if o != "command=train"]
    done = run_cli("eval", "recipe=strata_sokoban", *tiny, *SMALL_STRATA, f"checkpoint={tmp_path / 'run'}",
                   "eval.num_tasks=1", "eval.samples_per_task=2", f"hydra.run.dir={out}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads((out / "eval.json").read_text())["checkpoint"]["iteration"] == 1
    played = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(played) == 2 and [t["meta"]["strategy_index"] for t in played] == [0, 1]
    assert all(t["meta"]["strategy"] and "flagged_steps" not in t["meta"] for t in played)


def test_judgment_agreement_with_replay_necessity_labels():
    """On a real Sokoban room: an invalid turn then the BFS expert's (shortest) solution. Replay labels the invalid
    turn redundant and every expert move necessary; a judgment flagging steps 1 and 2 agrees on all but step 2."""
    from agentforge.algorithms.strata_rollout import StraTAHooks, StrategyRolloutOptions
    from agentforge.envs.sokoban_solver import expert_actions
    from agentforge.rollout.workflow import Episode, EpisodePlan
    from agentforge.types import Observation, Trajectory, Turn

    task = TaskSampler("sokoban", "eval").sample(1)[0]
    solution = expert_actions(task, ENV_OPTIONS)
    assert solution and len(solution) < ENV_OPTIONS["max_steps"]

    def turn(action, executed):
        return Turn([1], [2], [-0.1], [False], "", action, executed, 0.0, 0.0, "a", "obs",
                    info={"executed": executed})

    turns = [turn(None, False), *(turn(a, True) for a in solution)]
    trajectory = Trajectory(task, 0, turns=turns, won=True, meta={"judgment": "ok", "flagged_steps": [1, 2]})
    episode = Episode(0, EpisodePlan(task, 0, 0), trajectory, Observation("", "a"))
    hooks = StraTAHooks(StrategyRolloutOptions(2, 2, 2, judgment=True, judge_replay_agreement=True))
    hooks.plan([task], 4)
    ctx = RolloutContext(None, LocalEnvPool("sokoban", ENV_OPTIONS), prompt_for("sokoban"), AgentConfig())
    hooks._replay_agreement([episode], ctx)
    assert trajectory.meta["replay_redundant_steps"] == [1]
    metrics = hooks.metrics()
    assert metrics["strata/replay_labelled_steps"] == len(turns)
    assert metrics["strata/judgment_replay_agreement"] == pytest.approx((len(turns) - 1) / len(turns))
    f, r = 2 / len(turns), 1 / len(turns)  # 2 flagged, 1 redundant: what random flags at that rate would reach
    assert metrics["strata/judgment_replay_agreement_chance"] == pytest.approx(f * r + (1 - f) * (1 - r))


@pytest.mark.parametrize("recipe", ["strata_sokoban", "strata_webshop", "strata_alfworld", "strata_scienceworld"])
def test_strategy_prompts_of_real_envs_fit_the_recipes(recipe):
    """Each recipe's env, reset for real: its strategy prompt shows the task and fits agent.max_prompt_tokens next to
    the strategy budget, and its first action prompt with a full-length strategy note fits too."""
    from agentforge.agent.chat import chat_prompt_ids
    from agentforge.agent.render import render_turn_prompt
    from agentforge.agent.strategy import strategy_messages, strategy_note, strategy_prompt_for
    from agentforge.commands.builders import build_pool
    from agentforge.models.loading import load_tokenizer

    cfg = compose_config([f"recipe={recipe}", "command=train", "env_pool.kind=local", "model=tiny"])
    tokenizer = load_tokenizer(build_model_spec(cfg))
    pool = build_pool(cfg)
    try:
        task = TaskSampler(cfg.env.name, "train").sample(1)[0]
        observation = pool.reset([task])[0]
    finally:
        pool.close()
    template = prompt_for(cfg.env.name)
    ids = chat_prompt_ids(tokenizer, strategy_messages(template, strategy_prompt_for(cfg.env.name), observation))
    assert len(ids) <= cfg.agent.max_prompt_tokens
    assert len(ids) + cfg.algorithm.strategy_max_tokens <= cfg.engine.max_model_len
    long_strategy = " ".join(["word"] * cfg.algorithm.strategy_max_tokens)
    config = AgentConfig(max_prompt_tokens=cfg.agent.max_prompt_tokens, history_length=cfg.agent.history_length)
    turn = render_turn_prompt(template, tokenizer, config, observation, [], 1, task, [strategy_note(long_strategy)])
    assert len(turn) <= cfg.agent.max_prompt_tokens
