"""Rollout correction (TIS/MIS), the KL-in-reward controller, DAPO's dynamic sampling, mini-batches and the options'
validation, against hand-worked numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentforge.errors import ConfigError
from agentforge.learner import LearnerConfig, TurnSample
from agentforge.learner.driver import combine_steps, mini_batches
from agentforge.objective import CorrectionSpec, mismatch_metrics, rollout_correction
from agentforge.objective.dynamic_sampling import DynamicSampling, has_signal
from agentforge.rewards.kl import KLInReward
from agentforge.rollout.workflow import RolloutResult, RolloutStats
from agentforge.training.sampling_rounds import play_with_signal
from agentforge.types import Group, Task, Trajectory, Turn

pytestmark = pytest.mark.unit


# --------------------------------------------------------------------------------------------- correction

def logs(*ratios: float) -> np.ndarray:
    return np.log(np.asarray(ratios, np.float64))


def test_token_tis_truncates_each_weight():
    learner, engine = [logs(1.0, 3.0, 0.5)], [np.zeros(3)]
    out = rollout_correction(learner, engine, [np.ones(3, bool)], CorrectionSpec(is_level="token", is_threshold=2.0))
    np.testing.assert_allclose(out.weights[0], [1.0, 2.0, 0.5], rtol=1e-6)
    assert out.keep[0].all() and out.metrics["rollout/is_truncated_fraction"] == pytest.approx(1 / 3)


def test_sequence_tis_uses_the_product_of_ratios_for_every_token():
    learner, engine = [logs(1.5, 1.2), logs(0.5, 0.8)], [np.zeros(2), np.zeros(2)]
    masks = [np.ones(2, bool), np.ones(2, bool)]
    out = rollout_correction(learner, engine, masks, CorrectionSpec(is_level="sequence", is_threshold=2.0))
    np.testing.assert_allclose(out.weights[0], [1.8, 1.8], rtol=1e-6)
    np.testing.assert_allclose(out.weights[1], [0.4, 0.4], rtol=1e-6)


def test_rejection_by_token_sequence_and_geometric_mean():
    learner = [logs(1.0, 3.0, 1.0), logs(1.5, 1.5, 1.5)]  # product 3.375, geometric mean 1.5
    engine = [np.zeros(3), np.zeros(3)]
    masks = [np.ones(3, bool), np.array([True, True, True])]
    token = rollout_correction(learner, engine, masks, CorrectionSpec(rejection="token", rejection_low=0.5,
                                                                      rejection_high=2.0))
    assert token.keep[0].tolist() == [True, False, True] and token.keep[1].all()
    assert token.metrics["rollout/rejected_token_fraction"] == pytest.approx(1 / 6)
    sequence = rollout_correction(learner, engine, masks, CorrectionSpec(rejection="sequence", rejection_low=0.5,
                                                                         rejection_high=2.0))
    assert not sequence.keep[0].any() and not sequence.keep[1].any()  # products 3 and 3.375
    geometric = rollout_correction(learner, engine, masks, CorrectionSpec(rejection="geometric", rejection_low=0.5,
                                                                          rejection_high=2.0))
    assert geometric.keep[0].all() and geometric.keep[1].all()  # 3^(1/3) = 1.44 and 1.5 are inside the band
    assert geometric.metrics["rollout/rejected_sequence_fraction"] == 0.0


def test_verl_k1_rejection_names_bound_the_inverse_ratio_and_clamp_each_token():
    """verl's token_k1 / seq_sum_k1 / seq_mean_k1 (since its PR #4511) bound π_engine/π_old, the inverse of the
    older names' π_old/π_engine: the same asymmetric band keeps other tokens; each token's log-ratio is clamped to
    ±20 before a sequence's sum or mean."""
    learner, engine, masks = [logs(1.0, 1.5, 0.6)], [np.zeros(3)], [np.ones(3, bool)]
    band = {"rejection_low": 0.8, "rejection_high": 2.0}
    old = rollout_correction(learner, engine, masks, CorrectionSpec(rejection="token", **band))
    k1 = rollout_correction(learner, engine, masks, CorrectionSpec(rejection="token_k1", **band))
    assert old.keep[0].tolist() == [True, True, False]  # π_old/π_engine = 1, 1.5, 0.6
    assert k1.keep[0].tolist() == [True, False, True]  # π_engine/π_old = 1, 0.67, 1.67
    clamped = [np.array([-30.0, 25.0])]  # log-ratios engine - learner: 30 and -25, clamped to 20 and -20
    for name, kept in (("seq_sum_k1", True), ("seq_mean_k1", True), ("sequence", False), ("geometric", False)):
        out = rollout_correction(clamped, [np.zeros(2)], [np.ones(2, bool)], CorrectionSpec(rejection=name, **band))
        assert out.keep[0].all() == kept and out.keep[0].any() == kept, name  # unclamped: sum -5, mean -2.5
    mean = rollout_correction([logs(1.0, 0.3)], [np.zeros(2)], [np.ones(2, bool)],
                              CorrectionSpec(rejection="seq_mean_k1", **band))  # π_e/π_old 1 and 3.33: mean 1.83
    assert mean.keep[0].all() and mean.metrics["rollout/rejected_sequence_fraction"] == 0.0
    summed = rollout_correction([logs(1.0, 0.3)], [np.zeros(2)], [np.ones(2, bool)],
                                CorrectionSpec(rejection="seq_sum_k1", **band))  # product 3.33 > 2
    assert not summed.keep[0].any() and summed.metrics["rollout/rejected_sequence_fraction"] == 1.0
    assert LearnerConfig.from_mapping({"old_logprobs": "recompute", "rollout_correction": {
        "rejection": "seq_mean_k1", "rejection_threshold": 2.0}}).validate().correction_spec().rejection == \
        "seq_mean_k1"


def test_non_loss_tokens_never_count():
    learner, engine = [logs(50.0, 1.0)], [np.zeros(2)]
    out = rollout_correction(learner, engine, [np.array([False, True])],
                             CorrectionSpec(is_level="sequence", rejection="sequence"))
    assert out.keep[0].tolist() == [False, True] and out.weights[0][1] == pytest.approx(1.0)


def test_mismatch_metrics():
    learner, engine = [np.array([-1.0, -2.0])], [np.array([-1.1, -2.0])]
    m = mismatch_metrics(learner, engine, [np.ones(2, bool)])
    assert m["rollout/mismatch_abs_max"] == pytest.approx(0.1)
    assert m["rollout/mismatch_k3"] == pytest.approx((math.exp(0.1) - 0.1 - 1) / 2)
    assert m["rollout/is_weight_max"] == pytest.approx(math.exp(0.1))


# --------------------------------------------------------------------------------------------- KL in reward

def turn_with(reward: float) -> Turn:
    return Turn(prompt_ids=[1], response_ids=[2, 3], logprobs=[0.0, 0.0], forced_mask=[False, False],
                response_text="", action=None, valid=True, reward=reward, env_reward=reward, anchor="a",
                observation="")


def kl_sample(old: list[float], ref: list[float]) -> TurnSample:
    return TurnSample(input_ids=[1, 2, 3], loss_mask=[False, True, True], old_logprobs=[0.0, *old],
                      advantage=0.0, prompt_len=1, ref_logprobs=[0.0, *ref])


def test_kl_penalty_is_subtracted_from_each_turn_reward():
    turns = [turn_with(1.0), turn_with(0.0)]
    samples = [kl_sample([-1.0, -1.0], [-1.5, -1.0]), kl_sample([-2.0, -2.0], [-2.0, -2.0])]
    penalty = KLInReward(0.1, estimator="k1")
    metrics = penalty.score_samples(samples, turns)
    assert turns[0].reward == pytest.approx(1.0 - 0.1 * 0.5) and turns[1].reward == 0.0
    assert metrics["kl/mean"] == pytest.approx((0.25 + 0.0) / 2)
    assert penalty.value == 0.1  # fixed


def test_adaptive_controller_follows_ziegler_et_al():
    penalty = KLInReward(0.1, estimator="k1", target=0.05, horizon=10)
    turns = [turn_with(0.0), turn_with(0.0)]
    penalty.score_samples([kl_sample([-1.0, -1.0], [-1.5, -1.5]), kl_sample([-1.0, -1.0], [-1.5, -1.5])], turns)
    # KL 0.5 ≫ target: error clipped at +0.2, beta *= 1 + 0.2 * 2 / 10
    assert penalty.value == pytest.approx(0.1 * 1.04)
    assert KLInReward(0.0).state_dict() == {"value": 0.0}


# ---------------------------------------------------------------------------------------- dynamic sampling

def group(seed: int, returns: list[float]) -> Group:
    task = Task("bandit", seed)
    return Group(task, [Trajectory(task, i, [turn_with(r)]) for i, r in enumerate(returns)])


def test_groups_without_signal_are_replaced_by_more_rounds_within_the_budget():
    rounds = [[group(0, [1, 1]), group(1, [0, 1])], [group(2, [0, 0]), group(3, [1, 0])],
              [group(4, [1, 0]), group(5, [0, 1])]]
    played = []

    def play(i: int) -> RolloutResult:
        played.append(i)
        return RolloutResult(rounds[i], RolloutStats(turns=2), {"hook": float(i)})

    result, every, counts = play_with_signal(play, 2, DynamicSampling(True, "return", 4))
    assert played == [0, 1] and [g.task.seed for g in result.groups] == [1, 3]
    assert counts == {"dynamic/rounds": 2.0, "dynamic/groups_played": 4.0, "dynamic/groups_dropped": 2.0,
                      "dynamic/groups_short": 0.0}
    assert len(every) == 4 and result.stats.turns == 4 and result.metrics["hook"] == 0.5
    played.clear()
    short, _, counts = play_with_signal(play, 5, DynamicSampling(True, "return", 2))
    assert played == [0, 1] and counts["dynamic/groups_short"] == 3.0 and len(short.groups) == 2


def test_signal_by_return_or_by_success():
    g = group(0, [1.0, 1.0])
    g.trajectories[0].won = True
    assert not has_signal(g, "return") and has_signal(g, "won")


# ------------------------------------------------------------------------------------------- mini-batches

def sample(tokens: int) -> TurnSample:
    return TurnSample(input_ids=np.arange(tokens + 1), loss_mask=np.r_[False, np.ones(tokens, bool)],
                      old_logprobs=np.zeros(tokens + 1), advantage=1.0, prompt_len=1)


def test_mini_batches_by_turns_and_by_tokens():
    samples = [sample(n) for n in (5, 3, 8, 2, 4)]
    assert mini_batches(samples, None, "turns", None) == [samples]
    by_turns = mini_batches(samples, 2, "turns", None)
    assert [len(p) for p in by_turns] == [2, 2, 1]
    by_tokens = mini_batches(samples, 8, "tokens", None)
    assert [sum(s.num_loss_tokens for s in p) for p in by_tokens] == [8, 8, 6]  # whole samples, >= 8 each
    shuffled = mini_batches(samples, 2, "turns", np.random.default_rng(0))
    assert sorted(id(s) for p in shuffled for s in p) == sorted(id(s) for s in samples)
    assert mini_batches(samples, 9, "turns", None) == [samples]


def test_combine_steps_reports_each_epochs_clip_fraction():
    steps = [{"tokens": 10.0, "samples": 2.0, "clip_fraction": 0.0, "loss": 1.0, "grad_norm": 1.0, "lr": 1e-3,
              "epoch": 1.0},
             {"tokens": 10.0, "samples": 2.0, "clip_fraction": 0.4, "loss": 3.0, "grad_norm": 3.0, "lr": 2e-3,
              "epoch": 2.0}]
    out = combine_steps(steps)
    assert out["clip_fraction_epoch_1"] == 0.0 and out["clip_fraction_epoch_2"] == pytest.approx(0.4)
    assert out["loss"] == pytest.approx(2.0) and out["tokens"] == 10.0 and out["optimizer_steps"] == 2.0
    assert out["grad_norm"] == 2.0 and out["lr"] == 2e-3
    assert combine_steps(steps[:1]) == {k: v for k, v in steps[0].items() if k != "epoch"}


def test_counts_add_up_over_steps_and_ranks_and_become_clip_fractions_per_lag():
    from agentforge.learner.driver import aggregate_rank_metrics
    from agentforge.training.asynchronous import lag_clip_fractions

    steps = [{"tokens": 10.0, "clip_fraction": 0.1, "epoch": 1.0, "count/tokens_stratum_1": 4.0,
              "count/clipped_stratum_1": 1.0},
             {"tokens": 10.0, "clip_fraction": 0.3, "epoch": 2.0, "count/tokens_stratum_1": 4.0,
              "count/clipped_stratum_1": 3.0, "count/tokens_stratum_0": 6.0, "count/clipped_stratum_0": 0.0}]
    out = combine_steps(steps)
    assert out["count/tokens_stratum_1"] == 8.0 and out["count/clipped_stratum_1"] == 4.0
    ranks = aggregate_rank_metrics([out, {"tokens": 5.0, "count/tokens_stratum_1": 2.0,
                                          "count/clipped_stratum_1": 1.0}])
    assert ranks["count/tokens_stratum_1"] == 10.0 and ranks["count/clipped_stratum_0"] == 0.0
    lags = lag_clip_fractions(ranks)
    assert lags == {"async/lag_0/clip_fraction": 0.0, "async/lag_0/trained_tokens": 6.0,
                    "async/lag_1/clip_fraction": 0.5, "async/lag_1/trained_tokens": 10.0}
    assert not any(k.startswith("count/") for k in ranks)  # moved out of the learner's metrics


# -------------------------------------------------------------------------------------------------- config

@pytest.mark.parametrize("values,message", [
    ({"loss": {"policy_loss": "ppo2"}}, "loss.policy_loss='ppo2' is unknown; use one of cispo, gspo, reinforce"),
    ({"loss": {"agg_mode": "mean"}}, "loss.agg_mode='mean' is unknown; use one of token-mean"),
    ({"loss": {"kl_estimator": "k9"}}, "loss.kl_estimator='k9' is unknown; use one of k1, k2, k3"),
    ({"loss": {"eps_low": 1.5}}, r"loss.eps_low=1.5 must be in \[0, 1\)"),
    ({"loss": {"clip_ratio_c": 0.5}}, "loss.clip_ratio_c=0.5: must be > 1"),
    ({"ppo_epochs": 0}, "ppo_epochs=0: must be >= 1"),
    ({"mini_batch_size": 0}, "mini_batch_size=0: must be >= 1"),
    ({"old_logprobs": "vllm"}, "old_logprobs='vllm': is not one of engine, recompute"),
    ({"old_logprobs": "recompute", "rollout_correction": {"rejection": "sequence", "rejection_threshold": 2.0,
                                                          "rejection_threshold_lower": 3.0}},
     "bounds are inverted or empty"),
    ({"rollout_correction": {"is_level": "token"}}, "set learner.old_logprobs=recompute"),
    ({"old_logprobs": "recompute", "rollout_correction": {"is_level": "tok"}},
     "is_level='tok': is not one of token, sequence"),
])
def test_bad_objective_options_name_the_key_and_the_fix(values, message):
    with pytest.raises(ConfigError, match=message):
        LearnerConfig.from_mapping(values).validate()


def test_policy_loss_defaults_fill_the_clip_and_aggregation():
    gspo_cfg = LearnerConfig.from_mapping({"loss": {"policy_loss": "gspo"}})
    gspo = gspo_cfg.objective_spec()  # KL and entropy token-mean (verl's loss_agg_mode default); GSPO's own term
    assert (gspo.clip.eps_low, gspo.clip.eps_high, gspo.agg_mode) == (3e-4, 4e-4, "token-mean")
    assert gspo_cfg.loss.policy_aggregation() == "seq-mean-token-mean"
    vanilla = LearnerConfig().objective_spec()
    assert (vanilla.clip.eps_low, vanilla.clip.eps_high, vanilla.clip.clip_ratio_c) == (0.2, 0.28, 3.0)
    assert vanilla.agg_mode == "token-mean"
    gpg = LearnerConfig.from_mapping({"loss": {"policy_loss": "gpg", "agg_mode": "seq-mean-token-sum"}})
    assert gpg.validate().objective_spec().policy_loss == "reinforce"


def test_gspo_on_engine_logprobs_is_warned_about(caplog):
    from agentforge.commands.train import warn_about_the_objective

    with caplog.at_level("WARNING", logger="agentforge.training.trainer"):
        warn_about_the_objective(LearnerConfig.from_mapping({"loss": {"policy_loss": "gspo"}}))
    assert "set learner.old_logprobs=recompute" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="agentforge.training.trainer"):
        warn_about_the_objective(LearnerConfig.from_mapping({"loss": {"policy_loss": "gspo"},
                                                             "old_logprobs": "recompute"}))
        warn_about_the_objective(LearnerConfig())
    assert caplog.text == ""
    with caplog.at_level("WARNING", logger="agentforge.training.trainer"):
        warn_about_the_objective(LearnerConfig.from_mapping({"loss": {"policy_loss": "gspo", "agg_mode": "token-mean"},
                                                             "old_logprobs": "recompute"}))
    assert "aggregates the KL and entropy terms only: gspo's policy term is always seq-mean-token-mean" in caplog.text
