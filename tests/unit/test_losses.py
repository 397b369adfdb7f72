"""The clipped token-level policy loss against hand-worked numbers."""

from __future__ import annotations

import math

import pytest
import torch

from agentforge.algorithms.losses import clipped_policy_loss, k3_kl
from agentforge.errors import ConfigError

pytestmark = pytest.mark.unit


def test_ratio_one_gives_minus_mean_advantage():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -1.1]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    loss, metrics = clipped_policy_loss(logp, logp.detach().clone(), adv, torch.ones(2, 3))
    assert loss.item() == pytest.approx(-(3 * 1.0 + 3 * -2.0) / 6)  # = 0.5
    assert metrics["clip_fraction"] == 0.0
    assert metrics["approx_kl"] == 0.0 and metrics["logprob_abs_diff"] == 0.0
    loss.backward()
    # d/dlogp of −ρA/6 at ρ = 1 is −A/6
    assert logp.grad.flatten().tolist() == pytest.approx([-1 / 6] * 3 + [2 / 6] * 3)


def test_per_sequence_advantages_broadcast_over_tokens():
    logp = torch.zeros(2, 3)
    loss, _ = clipped_policy_loss(logp, logp, torch.tensor([1.0, -2.0]), torch.ones(2, 3))
    assert loss.item() == pytest.approx(0.5)


def test_clipping_on_both_sides_with_hand_numbers():
    # ratios 1.5, 1.5, 0.5, 0.5 ; advantages +1, -1, +1, -1
    ratios = torch.tensor([1.5, 1.5, 0.5, 0.5])
    logp = torch.log(ratios).requires_grad_()
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, metrics = clipped_policy_loss(logp, torch.zeros(4), adv, torch.ones(4), eps_low=0.2, eps_high=0.28)
    # token terms min(ρA, clip(ρ)A):
    #   ρ=1.5, A=+1: min(1.5, 1.28) = 1.28   (clipped high)
    #   ρ=1.5, A=−1: min(−1.5, −1.28) = −1.5 (not clipped: pessimistic side)
    #   ρ=0.5, A=+1: min(0.5, 0.8) = 0.5     (not clipped)
    #   ρ=0.5, A=−1: min(−0.5, −0.8) = −0.8  (clipped low)
    assert loss.item() == pytest.approx(-(1.28 - 1.5 + 0.5 - 0.8) / 4)
    assert metrics["clip_fraction"] == pytest.approx(0.5)
    assert metrics["clip_fraction_high"] == pytest.approx(0.25)
    assert metrics["clip_fraction_low"] == pytest.approx(0.25)
    loss.backward()
    # clipped tokens get no gradient; the others −ρA/4
    assert logp.grad.tolist() == pytest.approx([0.0, 1.5 / 4, -0.5 / 4, 0.0])


def test_symmetric_clip_with_eps_high_equal_to_eps_low():
    logp = torch.log(torch.tensor([1.25]))
    loss, metrics = clipped_policy_loss(logp, torch.zeros(1), torch.ones(1), torch.ones(1), eps_high=0.2)
    assert loss.item() == pytest.approx(-1.2)
    assert metrics["clip_fraction"] == 1.0


def test_masked_tokens_are_excluded():
    logp = torch.tensor([[0.0, 0.0, 5.0], [0.0, 9.0, 9.0]], requires_grad=True)
    old = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 3.0, 100.0], [2.0, 100.0, 100.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    loss, metrics = clipped_policy_loss(logp, old, adv, mask)
    assert loss.item() == pytest.approx(-(1.0 + 3.0 + 2.0) / 3)
    assert metrics["approx_kl"] == 0.0 and metrics["clip_fraction"] == 0.0
    loss.backward()
    assert logp.grad[0, 2].item() == 0.0 and logp.grad[1, 1:].abs().sum().item() == 0.0


def test_num_tokens_sets_the_denominator_for_gradient_accumulation():
    logp = torch.zeros(1, 2)
    loss, metrics = clipped_policy_loss(logp, logp, torch.ones(1, 2), torch.ones(1, 2), num_tokens=8)
    assert loss.item() == pytest.approx(-2 / 8)
    assert metrics["pg_loss"] == pytest.approx(-1.0)  # metrics stay per-token means of this call


def test_empty_mask_gives_zero_loss():
    logp = torch.zeros(1, 2, requires_grad=True)
    loss, _ = clipped_policy_loss(logp, torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1, 2))
    assert loss.item() == 0.0
    loss.backward()


def test_k3_kl_values():
    assert k3_kl(torch.zeros(3)).tolist() == [0.0, 0.0, 0.0]
    d = 0.5
    assert k3_kl(torch.tensor([d])).item() == pytest.approx(math.exp(d) - d - 1)


def test_kl_to_reference_is_zero_when_equal_and_added_with_its_coefficient():
    logp = torch.tensor([-1.0, -2.0])
    adv = torch.zeros(2)
    mask = torch.ones(2)
    loss, metrics = clipped_policy_loss(logp, logp, adv, mask, ref_logp=logp.clone(), kl_coef=0.5)
    assert metrics["kl_ref"] == 0.0 and loss.item() == 0.0
    ref = torch.tensor([-1.5, -2.0])  # ref − logp = (−0.5, 0)
    loss, metrics = clipped_policy_loss(logp, logp, adv, mask, ref_logp=ref, kl_coef=0.5)
    kl = (math.exp(-0.5) + 0.5 - 1) / 2
    assert metrics["kl_ref"] == pytest.approx(kl)
    assert loss.item() == pytest.approx(0.5 * kl)
    # reported but not added when the coefficient is 0
    loss, metrics = clipped_policy_loss(logp, logp, adv, mask, ref_logp=ref)
    assert loss.item() == 0.0 and metrics["kl_ref"] == pytest.approx(kl)


def test_approx_kl_between_new_and_old():
    logp = torch.tensor([-1.0, -1.0])
    old = torch.tensor([-1.2, -0.9])  # old − new = (−0.2, 0.1)
    _, metrics = clipped_policy_loss(logp, old, torch.zeros(2), torch.ones(2))
    expected = ((math.exp(-0.2) + 0.2 - 1) + (math.exp(0.1) - 0.1 - 1)) / 2
    assert metrics["approx_kl"] == pytest.approx(expected, rel=1e-5)  # float32
    assert metrics["logprob_abs_diff"] == pytest.approx(0.15)


def test_entropy_bonus():
    logp = torch.zeros(2)
    entropy = torch.tensor([1.0, 3.0])
    loss, metrics = clipped_policy_loss(logp, logp, torch.zeros(2), torch.ones(2), entropy=entropy, entropy_coef=0.1)
    assert loss.item() == pytest.approx(-0.1 * 2.0)
    assert metrics["entropy"] == pytest.approx(2.0)
    assert "entropy" not in clipped_policy_loss(logp, logp, torch.zeros(2), torch.ones(2))[1]


def test_bad_inputs_name_the_problem():
    x = torch.zeros(2, 3)
    with pytest.raises(ConfigError, match="kl_coef=0.1 needs reference log-probs"):
        clipped_policy_loss(x, x, x, x, kl_coef=0.1)
    with pytest.raises(ConfigError, match="entropy_coef=0.01 needs per-token entropies"):
        clipped_policy_loss(x, x, x, x, entropy_coef=0.01)
    with pytest.raises(ValueError, match=r"mask has shape \(2, 2\) but logp has \(2, 3\)"):
        clipped_policy_loss(x, x, x, torch.ones(2, 2))
    with pytest.raises(ValueError, match="advantages shape"):
        clipped_policy_loss(x, x, torch.zeros(3), x)
    with pytest.raises(ConfigError, match="clip bounds"):
        clipped_policy_loss(x, x, x, x, eps_low=1.0)
