"""The policy objective against independent references written here from the papers' formulas and verl's documented
semantics (per-sequence loops in numpy / plain autograd; nothing taken from the implementation): policy losses,
dual clip and clamps, aggregation modes and their invariance to micro-batches and ranks, KL estimators, masked
tokens that cannot poison the loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from agentforge.objective import ClipParams, Normalizer, ObjectiveSpec, kl_estimate, policy_objective
from agentforge.objective.kl import canonical_estimator, k3

pytestmark = pytest.mark.unit

VANILLA = ObjectiveSpec()


def spec(**kw) -> ObjectiveSpec:
    clip = kw.pop("clip", ClipParams(0.2, 0.28))
    return ObjectiveSpec(clip=clip, **kw)


def run(logp, old, adv, mask=None, seq=None, s=VANILLA, **kw):
    logp = torch.as_tensor(logp, dtype=torch.float32).clone().requires_grad_()
    old, adv = torch.as_tensor(old, dtype=torch.float32), torch.as_tensor(adv, dtype=torch.float32)
    mask = torch.ones_like(old, dtype=torch.bool) if mask is None else torch.as_tensor(mask, dtype=torch.bool)
    seq = torch.zeros(len(old), dtype=torch.long) if seq is None else torch.as_tensor(seq, dtype=torch.long)
    loss, metrics = policy_objective(logp, old, adv, mask, seq, s, **kw)
    loss.backward()
    return loss.item(), metrics, logp.grad.numpy()


# ------------------------------------------------------------------------------------------- vanilla PPO clip


def test_ratio_one_gives_minus_mean_advantage_and_its_gradient():
    loss, m, grad = run([-1.0, -2.0, -0.5, -0.3], [-1.0, -2.0, -0.5, -0.3], [1.0, 1.0, -2.0, -2.0])
    assert loss == pytest.approx(0.5)
    assert m["clip_fraction"] == 0.0 and m["approx_kl"] == 0.0 and m["logprob_abs_diff"] == 0.0
    assert grad.tolist() == pytest.approx([-0.25, -0.25, 0.5, 0.5])  # d(−ρA/4)/dlogp at ρ = 1


def test_clipping_on_both_sides_with_hand_numbers():
    # ρ = 1.5, 1.5, 0.5, 0.5 with A = +1, −1, +1, −1: min(ρA, clip(ρ)A) = 1.28, −1.5, 0.5, −0.8
    loss, m, grad = run(np.log([1.5, 1.5, 0.5, 0.5]), np.zeros(4), [1.0, -1.0, 1.0, -1.0])
    assert loss == pytest.approx(-(1.28 - 1.5 + 0.5 - 0.8) / 4)
    assert (m["clip_fraction"], m["clip_fraction_high"], m["clip_fraction_low"]) == pytest.approx((0.5, 0.25, 0.25))
    assert m["clip_fraction_dual"] == 0.0
    assert grad.tolist() == pytest.approx([0.0, 1.5 / 4, -0.5 / 4, 0.0])  # clipped tokens get no gradient


def test_dual_clip_bounds_a_runaway_negative_advantage_token():
    # ρ = e^10 with A = −1: the PPO term is 22026, the dual clip bounds it at −c·A = 3 and removes its gradient
    loss, m, grad = run([10.0, 0.0], [0.0, 0.0], [-1.0, 1.0])
    assert loss == pytest.approx((3.0 - 1.0) / 2)
    assert m["clip_fraction_dual"] == pytest.approx(0.5)
    assert grad[0] == 0.0 and grad[1] == pytest.approx(-0.5)
    off, _, grad_off = run([10.0, 0.0], [0.0, 0.0], [-1.0, 1.0], s=spec(clip=ClipParams(0.2, 0.28, None)))
    assert off == pytest.approx((math.exp(10) - 1) / 2, rel=1e-5) and abs(grad_off[0]) > 1e3


def test_log_ratio_is_clamped_before_exp():
    loss, _, _ = run([80.0], [0.0], [-1.0], s=spec(clip=ClipParams(0.2, 0.28, None)))
    assert loss == pytest.approx(math.exp(20.0), rel=1e-5)  # not inf


def test_masked_tokens_are_selected_out_so_non_finite_values_cannot_poison_the_loss():
    logp = [0.0, 0.0, 5.0, 0.0]
    old = [0.0, 0.0, -math.inf, math.nan]
    adv = [1.0, 3.0, math.nan, 100.0]
    mask = [True, True, False, False]
    ref = torch.tensor([0.0, 0.0, math.nan, math.inf])
    weights = torch.tensor([1.0, 1.0, math.inf, math.nan])
    loss, m, grad = run(logp, old, adv, mask, s=spec(kl_coef=0.1), ref_logp=ref, is_weights=weights)
    assert loss == pytest.approx(-2.0) and all(math.isfinite(v) for v in m.values())
    assert np.isfinite(grad).all() and grad[2:].tolist() == [0.0, 0.0]


def test_an_all_masked_call_gives_zero_and_a_connected_graph():
    loss, m, grad = run([1.0, 2.0], [0.0, 0.0], [1.0, 1.0], [False, False], norm=Normalizer(4, 2))
    assert loss == 0.0 and grad.tolist() == [0.0, 0.0] and m["pg_loss"] == 0.0


# ------------------------------------------------------------------------------------------------ aggregation


def reference_aggregate(loss: np.ndarray, seq: np.ndarray, mode: str, scale: float) -> float:
    """The modes as verl documents them and Dr. GRPO states its objective, one sequence at a time."""
    sequences = sorted(set(seq.tolist()))
    per_seq_sum = [loss[seq == i].sum() for i in sequences]
    per_seq_mean = [loss[seq == i].mean() for i in sequences]
    if mode == "token-mean":
        return float(loss.sum() / len(loss))
    if mode == "seq-mean-token-mean":
        return float(np.mean(per_seq_mean))
    if mode == "seq-mean-token-sum":
        return float(np.mean(per_seq_sum))
    return float(np.mean([s / scale for s in per_seq_sum]))  # Dr. GRPO: mean_i (Σ_t ℓ / L)


def random_batch(seed: int = 0, n_seq: int = 6):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 9, n_seq)
    seq = np.repeat(np.arange(n_seq), lengths)
    n = len(seq)
    old = rng.normal(-2, 1, n)
    logp = old + rng.normal(0, 0.3, n)
    adv = np.repeat(rng.normal(0, 1, n_seq), lengths)
    return logp, old, adv, seq


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_aggregation_modes_match_the_reference(mode):
    logp, old, adv, seq = random_batch()
    s = spec(agg_mode=mode, clip=ClipParams(0.2, 0.28, None))
    norm = Normalizer(len(seq), len(set(seq.tolist())), 16.0)
    loss, _, _ = run(logp, old, adv, seq=seq, s=s, norm=norm)
    ratio = np.exp(logp - old)
    token = -np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.28) * adv)
    assert loss == pytest.approx(reference_aggregate(token, seq, mode, 16.0), rel=1e-5)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("policy", ["vanilla", "gspo", "cispo", "reinforce"])
def test_micro_batches_and_ranks_do_not_change_the_gradient(mode, policy):
    """The batch split in 3 micro-batches (whole sequences each), or over 2 ranks whose gradients are averaged,
    gives the same gradient as one pass."""
    logp, old, adv, seq = random_batch(1, n_seq=7)
    s = spec(policy_loss=policy, agg_mode=mode, clip=ClipParams(0.2, 0.28, 3.0))
    full = Normalizer(len(seq), 7, 32.0)
    _, _, whole = run(logp, old, adv, seq=seq, s=s, norm=full)
    pieces = [np.isin(seq, group) for group in ([0, 1, 2], [3], [4, 5, 6])]
    split = np.zeros_like(whole)
    for piece in pieces:
        _, _, g = run(logp, old, adv, mask=piece, seq=seq, s=s, norm=full)
        split += g
    np.testing.assert_allclose(split, whole, rtol=1e-5, atol=1e-7)
    ranks = np.zeros_like(whole)
    for piece in (np.isin(seq, [0, 1, 2, 3]), np.isin(seq, [4, 5, 6])):
        _, _, g = run(logp, old, adv, mask=piece, seq=seq, s=s, norm=full.per_rank(2))
        ranks += g / 2  # DeepSpeed averages gradients over data-parallel ranks
    np.testing.assert_allclose(ranks, whole, rtol=1e-5, atol=1e-7)


# --------------------------------------------------------------------------------------------- other losses


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum"])
def test_gspo_policy_term_is_a_mean_over_sequences_whatever_agg_mode_says(mode):
    """As verl's compute_policy_loss_gspo (seq-mean-token-mean, hard-coded): `agg_mode` then aggregates only the KL
    and entropy terms (here token-mean or a per-sequence sum, checked against the reference)."""
    logp, old, adv, seq = random_batch(3, n_seq=5)
    clip = ClipParams(0.05, 0.03, None)
    per_sequence, _, grad = run(logp, old, adv, seq=seq, s=spec(policy_loss="gspo", agg_mode="seq-mean-token-mean",
                                                                clip=clip))
    policy, _, grad_mode = run(logp, old, adv, seq=seq, s=spec(policy_loss="gspo", agg_mode=mode, clip=clip))
    assert policy == pytest.approx(per_sequence, rel=1e-6)
    np.testing.assert_allclose(grad_mode, grad, rtol=1e-5, atol=1e-8)
    ref = old - 0.2 + 0.1 * np.sin(np.arange(len(old)))
    with_kl, _, _ = run(logp, old, adv, seq=seq, s=spec(policy_loss="gspo", agg_mode=mode, clip=clip, kl_coef=0.5),
                        ref_logp=torch.tensor(ref, dtype=torch.float32))
    d = logp - ref
    k3_values = np.exp(-d) + d - 1.0
    assert with_kl - policy == pytest.approx(0.5 * reference_aggregate(k3_values, seq, mode, 1.0), rel=1e-4)


def test_gspo_matches_the_sequence_level_formula_and_its_gradient():
    logp, old, adv, seq = random_batch(2, n_seq=5)
    eps = (0.05, 0.03)  # sequence 2 (ratio 1.04, A > 0) clips, the others do not
    s = spec(policy_loss="gspo", agg_mode="seq-mean-token-mean", clip=ClipParams(*eps, None))
    loss, m, grad = run(logp, old, adv, seq=seq, s=s)
    # the paper's sequence objective: s_i = exp(mean_t log ρ_t), ℓ_i = −min(s_i A_i, clip(s_i) A_i), mean over i
    x = torch.tensor(logp, dtype=torch.float64, requires_grad=True)
    terms = []
    for i in range(5):
        at = torch.as_tensor(seq == i)
        s_i = torch.exp((x[at] - torch.tensor(old[at])).mean())
        a = float(adv[at][0])
        terms.append(-torch.minimum(s_i * a, torch.clamp(s_i, 1 - eps[0], 1 + eps[1]) * a))
    expected = torch.stack(terms).mean()
    expected.backward()
    assert loss == pytest.approx(expected.item(), rel=1e-5)
    np.testing.assert_allclose(grad, x.grad.numpy(), rtol=1e-4, atol=1e-7)
    ratios = [math.exp(np.mean(logp[seq == i] - old[seq == i])) for i in range(5)]
    clipped = [(r > 1 + eps[1] and adv[seq == i][0] > 0) or (r < 1 - eps[0] and adv[seq == i][0] < 0)
               for i, r in enumerate(ratios)]
    assert 0 < sum(clipped) < 5
    assert m["clip_fraction"] == pytest.approx(sum(np.sum(seq == i) for i, c in enumerate(clipped) if c) / len(seq))


def test_cispo_detaches_the_clipped_weight_and_keeps_every_token_gradient():
    logp = np.log([1.5, 0.5, 1.0])
    old = np.zeros(3)
    adv = np.array([1.0, -1.0, 2.0])
    loss, m, grad = run(logp, old, adv, s=spec(policy_loss="cispo", clip=ClipParams(10.0, 0.2, None)))
    w = np.minimum(np.exp(logp - old), 1.2)  # no lower bound with eps_low = 10
    assert loss == pytest.approx(float(np.mean(-w * adv * logp)), rel=1e-6)
    np.testing.assert_allclose(grad, -w * adv / 3, rtol=1e-6)  # ∂/∂logp of −sg(w)·A·logp / 3: never 0
    assert m["clip_fraction_high"] == pytest.approx(1 / 3)


def test_reinforce_is_minus_advantage_times_logprob():
    loss, m, grad = run([-1.0, -3.0], [0.0, 0.0], [2.0, -1.0], s=spec(policy_loss="reinforce"))
    assert loss == pytest.approx((2.0 * 1.0 - 3.0) / 2)
    assert grad.tolist() == pytest.approx([-1.0, 0.5])
    assert "clip_fraction_high" in m and m["clip_fraction"] == 0.0


def test_is_weights_multiply_each_token_loss():
    loss, m, grad = run([0.0, 0.0], [0.0, 0.0], [1.0, 1.0], is_weights=torch.tensor([2.0, 0.5]))
    assert loss == pytest.approx(-(2.0 + 0.5) / 2) and m["is_weight"] == pytest.approx(1.25)
    assert grad.tolist() == pytest.approx([-1.0, -0.25])


# ---------------------------------------------------------------------------------------------------------- KL


@pytest.mark.parametrize("name,formula", [
    ("k1", lambda d: d), ("k2", lambda d: d * d / 2), ("abs", abs), ("k3", lambda d: math.exp(-d) + d - 1),
])
def test_kl_estimators_match_schulmans_formulas(name, formula):
    d = np.array([-1.5, -0.2, 0.0, 0.4, 2.0])
    ref = np.zeros(5)
    got = kl_estimate(torch.tensor(d), torch.tensor(ref), name).numpy()
    np.testing.assert_allclose(got, [formula(x) for x in d], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", ["k1+", "k3+", "abs+"])
def test_straight_through_forms_keep_the_value_and_take_k2s_gradient(name):
    d = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    value = kl_estimate(d, torch.zeros(3, dtype=torch.float64), name)
    plain = kl_estimate(d.detach(), torch.zeros(3, dtype=torch.float64), name.rstrip("+"))
    torch.testing.assert_close(value.detach(), plain)
    value.sum().backward()
    torch.testing.assert_close(d.grad, d.detach())  # ∂(d²/2)/∂d = d


def test_k3_is_clamped_and_verl_names_are_accepted():
    assert kl_estimate(torch.tensor([-30.0]), torch.tensor([0.0]), "k3").item() == pytest.approx(10.0)
    assert [canonical_estimator(n) for n in ("kl", "mse", "low_var_kl", "low_var_kl+")] == ["k1", "k2", "k3", "k3+"]
    with pytest.raises(ValueError, match="unknown KL estimator 'k9'"):
        canonical_estimator("k9")
    assert k3(torch.zeros(2)).tolist() == [0.0, 0.0]


def test_kl_term_enters_the_loss_with_its_coefficient_and_is_reported_either_way():
    logp, ref = [-1.0, -2.0], torch.tensor([-1.5, -2.0])
    kl = (math.exp(-0.5) + 0.5 - 1) / 2
    loss, m, _ = run(logp, logp, [0.0, 0.0], s=spec(kl_coef=0.5), ref_logp=ref)
    assert m["kl_ref"] == pytest.approx(kl, rel=1e-5) and loss == pytest.approx(0.5 * kl, rel=1e-5)
    loss, m, _ = run(logp, logp, [0.0, 0.0], s=spec(kl_coef=0.5, kl_in_loss=False), ref_logp=ref)
    assert loss == 0.0 and m["kl_ref"] == pytest.approx(kl, rel=1e-5)


def test_entropy_bonus_uses_the_same_aggregation():
    loss, m, _ = run([0.0, 0.0], [0.0, 0.0], [0.0, 0.0], s=spec(entropy_coef=0.1), entropy=torch.tensor([1.0, 3.0]))
    assert loss == pytest.approx(-0.2) and m["entropy"] == pytest.approx(2.0)


def test_shapes_must_align():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match=r"mask has shape \(2,\) but logp has \(3,\)"):
        policy_objective(x, x, x, torch.ones(2, dtype=torch.bool), x.long(), VANILLA)


# ------------------------------------------------------------------------------------------- clip counts per stratum


def test_strata_count_clipped_tokens_of_each_stratum_apart():
    # ratios 1.5 (clipped high for A > 0), 1.0, 0.5 (clipped low for A < 0), 1.0; strata 0, 0, 1, -1 (none)
    logp = np.log([1.5, 1.0, 0.5, 1.0])
    _, metrics, _ = run(logp, np.zeros(4), [1.0, 1.0, -1.0, 1.0], strata=torch.tensor([0, 0, 1, -1]))
    assert metrics["count/tokens_stratum_0"] == 2 and metrics["count/clipped_stratum_0"] == 1
    assert metrics["count/tokens_stratum_1"] == 1 and metrics["count/clipped_stratum_1"] == 1
    assert not any(k.endswith("stratum_-1") for k in metrics)
    assert metrics["clip_fraction"] == pytest.approx(0.5)  # the overall fraction is unchanged by strata
    _, masked, _ = run(logp, np.zeros(4), [1.0, 1.0, -1.0, 1.0], mask=[False, True, True, True],
                       strata=torch.tensor([0, 0, 1, -1]))
    assert masked["count/tokens_stratum_0"] == 1 and masked["count/clipped_stratum_0"] == 0  # masked not counted
