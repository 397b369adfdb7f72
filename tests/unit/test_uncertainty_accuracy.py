"""The per-token entropy both engines record (T2PO's signal) against an fp64 reference at a large vocabulary: the
docstring's accuracy claim, measured."""

from __future__ import annotations

import pytest
import torch

from agentforge.engines.interventions import next_token_uncertainty

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("vocab", "scale", "offset"), [(151_936, 5.0, 0.0), (151_936, 5.0, 30.0), (49_152, 3.0, 10.0)])
def test_entropy_is_as_accurate_as_an_fp32_log_softmax(vocab, scale, offset):
    torch.manual_seed(0)
    logits = torch.randn(16, vocab) * scale + offset
    log_p = torch.log_softmax(logits.double(), -1)
    reference = -(log_p.exp() * log_p).sum(-1)
    plain = torch.log_softmax(logits, -1)
    plain_error = float((-(plain.exp() * plain).sum(-1).double() - reference).abs().max())
    entropy, top_prob = next_token_uncertainty(logits)
    assert float((entropy.double() - reference).abs().max()) <= max(plain_error, 1e-5)  # was 3e-4 / 7e-4 unshifted
    torch.testing.assert_close(top_prob.double(), log_p.exp().amax(-1), rtol=5e-5, atol=0)
