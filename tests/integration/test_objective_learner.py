"""The objective options on the real DeepSpeed learner (tiny model): the KL reference after a warm start, bf16
gradient accumulation in fp32, PPO epochs and mini-batches, recomputed old log-probs with rollout correction, the
sampling temperature, and aggregation modes invariant to micro-batch packing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from deepspeed.utils import safe_get_full_grad
from transformers import AutoModelForCausalLM

from agentforge.learner import Learner, LearnerConfig, TurnSample

pytestmark = pytest.mark.integration

VOCAB = 1000


def make_sample(rng: np.random.Generator, prompt: int, response: int, advantage: float) -> TurnSample:
    ids = rng.integers(0, VOCAB, prompt + response)
    return TurnSample(input_ids=ids, loss_mask=np.r_[np.zeros(prompt, bool), np.ones(response, bool)],
                      old_logprobs=np.zeros(prompt + response, np.float32), advantage=advantage, prompt_len=prompt)


def make_batch(seed: int = 0) -> list[TurnSample]:
    rng = np.random.default_rng(seed)
    return [make_sample(rng, p, r, a) for p, r, a in [(5, 7, 1.0), (9, 3, -1.0), (4, 10, 0.5), (6, 6, -0.5),
                                                         (3, 12, 0.25)]]


def engine_logprobs(learner: Learner, samples: list[TurnSample]) -> list[TurnSample]:
    """Old log-probs as a perfect engine would give them: the learner's own."""
    for sample, logp in zip(samples, learner.compute_logprobs(samples), strict=True):
        sample.old_logprobs[sample.prompt_len:] = logp
    return samples


def config(**overrides) -> LearnerConfig:
    return LearnerConfig.from_mapping({"lr": 1e-3, "micro_batch_tokens": 40, **overrides})


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir) -> str:
    return str(tiny_model_dir)


def sft(learner: Learner, seed: int = 7, steps: int = 3) -> None:
    samples = make_batch(seed)
    data = [TurnSample.for_sft(s.input_ids[: s.prompt_len], s.response_ids) for s in samples]
    for _ in range(steps):
        learner.sft_step(data, lr=3e-2)


# ------------------------------------------------------------------------------------------ KL reference


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_the_kl_reference_is_the_policy_rl_starts_from(model_dir, tmp_path, lora):
    cfg = config(loss={"kl_coef": 0.1}, lora={"enabled": lora})
    with Learner(model_dir, cfg, in_process=True) as learner:
        sft(learner)  # a warm start moves the policy away from the model as loaded
        stale = learner.update(engine_logprobs(learner, make_batch()))
        assert stale["kl_ref"] > 1e-3  # what the bug did: KL toward the pre-warm-start model
        learner.reset_reference()
        first = learner.update(engine_logprobs(learner, make_batch(1)))
        assert first["kl_ref"] == pytest.approx(0.0, abs=1e-7)
        second = learner.update(engine_logprobs(learner, make_batch(1)))
        assert second["kl_ref"] > 1e-6
        samples = make_batch(2)
        reference = learner.compute_logprobs(samples, reference=True)
        learner.save(tmp_path / "ckpt")
    with Learner(model_dir, cfg, in_process=True) as resumed:  # the moved reference survives a resume
        resumed.load(tmp_path / "ckpt")
        for a, b in zip(resumed.compute_logprobs(samples, reference=True), reference, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-6)


def test_lora_reference_costs_only_the_adapter(model_dir):
    with Learner(model_dir, config(loss={"kl_coef": 0.1}, lora={"enabled": True}), in_process=True) as learner:
        rank = learner.rank0
        assert rank.reference is None
        adapter = sum(t.numel() for t in rank.reference_adapter.values())
        assert 0 < adapter == sum(p.numel() for n, p in rank.engine.module.named_parameters() if "lora_" in n)


# ---------------------------------------------------------------------------------------------- bf16


def full_gradient(learner: Learner) -> torch.Tensor:
    return torch.cat([safe_get_full_grad(p).double().flatten() for p in learner.rank0.engine.module.parameters()])


def test_bf16_accumulates_gradients_and_keeps_optimizer_state_in_fp32(model_dir):
    """8 identical micro-batches: each one's bf16 gradient is g/8 exactly (the 1/8 is a power of two), so an fp32
    accumulation sums to exactly g. Accumulating in bf16 (DeepSpeed's default for a bf16 model, what agentforge
    did) rounds every partial sum: 0.39 % off here."""
    base = make_sample(np.random.default_rng(5), 8, 8, 1.0)
    cfg = config(dtype="bfloat16", micro_batch_tokens=16, sharing="none")
    with Learner(model_dir, cfg, in_process=True) as learner:
        rank = learner.rank0
        one = [base]
        engine_logprobs(learner, one)
        eight = [TurnSample(base.input_ids.copy(), base.loss_mask.copy(), base.old_logprobs.copy(), 1.0, 8)
                 for _ in range(8)]
        assert rank.accumulate_gradients(one)[2] == 1
        alone = full_gradient(learner)
        rank._discard_gradients()
        assert rank.accumulate_gradients(eight)[2] == 8
        accumulated = full_gradient(learner)
        assert safe_get_full_grad(next(rank.engine.module.parameters())).dtype == torch.float32
        torch.testing.assert_close(accumulated, alone, rtol=0, atol=0)
        rank._discard_gradients()
        learner.step(eight)
        states = [v for state in rank.engine.optimizer.optimizer.state.values() for v in state.values()
                  if torch.is_tensor(v) and v.dim() > 0]
        assert states and all(v.dtype == torch.float32 for v in states)
        masters = [p for group in rank.engine.optimizer.optimizer.param_groups for p in group["params"]]
        assert all(p.dtype == torch.float32 for p in masters)
        assert all(p.dtype == torch.bfloat16 for p in rank.engine.module.parameters())


# ------------------------------------------------------------------------------------ epochs, mini-batches


def test_the_clip_acts_from_the_second_epoch(model_dir):
    cfg = config(lr=2e-2, ppo_epochs=2, mini_batch_size=2, loss={"eps_low": 0.05, "eps_high": 0.05})
    with Learner(model_dir, cfg, in_process=True) as learner:
        samples = engine_logprobs(learner, make_batch())
        old = [s.old_logprobs.copy() for s in samples]
        metrics = learner.update(samples)
        steps = learner.last_steps
        assert [s["epoch"] for s in steps] == [1, 1, 1, 2, 2, 2] and metrics["optimizer_steps"] == 6
        assert steps[0]["clip_fraction"] == 0.0 and steps[0]["approx_kl"] < 1e-9  # ratio 1 before any update
        # later mini-batches of epoch 1 already see a moved policy; epoch 2 sees it everywhere
        assert metrics["clip_fraction_epoch_2"] > max(0.05, metrics["clip_fraction_epoch_1"])
        assert all(np.array_equal(s.old_logprobs, o) for s, o in zip(samples, old, strict=True))  # pi_old fixed
        assert learner.optimizer_steps() == 6


def test_the_lr_schedule_counts_optimizer_steps(model_dir):
    cfg = config(ppo_epochs=2, mini_batch_size=2, lr_schedule="linear", total_steps=12)
    with Learner(model_dir, cfg, in_process=True) as learner:
        learner.update(engine_logprobs(learner, make_batch()))
        rates = [s["lr"] for s in learner.last_steps]
    assert rates == pytest.approx([1e-3 * (1 - k / 12) for k in range(6)])


def test_mini_batch_order_is_seeded_and_reproducible(model_dir):
    results = []
    for _ in range(2):
        with Learner(model_dir, config(mini_batch_size=2), in_process=True) as learner:
            learner.update(engine_logprobs(learner, make_batch()))
            results.append([s["tokens"] for s in learner.last_steps])
    assert results[0] == results[1]


# ----------------------------------------------------------------------------- old log-probs, correction


def test_recomputed_old_logprobs_and_truncated_importance_sampling(model_dir):
    rng = np.random.default_rng(0)
    cfg = config(old_logprobs="recompute", rollout_correction={"is_level": "token", "is_threshold": 1.5})
    with Learner(model_dir, cfg, in_process=True) as learner:
        samples = engine_logprobs(learner, make_batch())
        exact = [s.old_logprobs.copy() for s in samples]
        for s in samples:  # an engine off by up to ±0.7 nats (a bf16 engine is off by ~0.035 on average)
            s.old_logprobs[s.prompt_len:] += rng.uniform(-0.7, 0.7, s.length - s.prompt_len).astype(np.float32)
        engine = [s.old_logprobs[s.prompt_len:].copy() for s in samples]
        metrics = learner.update(samples)
        for s, e, x in zip(samples, engine, exact, strict=True):
            np.testing.assert_allclose(s.old_logprobs, x, atol=1e-5)  # the ratio's denominator: the learner's
            np.testing.assert_array_equal(s.rollout_logprobs[s.prompt_len:], e)
            w = np.minimum(np.exp(x[s.prompt_len:] - e), 1.5)
            np.testing.assert_allclose(s.is_weights[s.prompt_len:], w, rtol=1e-4)
        diffs = np.concatenate([x[s.prompt_len:] - e for s, e, x in zip(samples, engine, exact, strict=True)])
        assert metrics["rollout/mismatch_abs_max"] == pytest.approx(np.abs(diffs).max(), rel=1e-4)
        assert metrics["rollout/is_truncated_fraction"] == pytest.approx(np.mean(np.exp(diffs) > 1.5), abs=1e-9)
        assert metrics["logprob_mismatch"] < 1e-5 and metrics["clip_fraction"] == 0.0  # ratio 1 at the first step
        assert 0.5 < metrics["is_weight"] < 1.5


def test_sequence_rejection_drops_mismatched_sequences_from_the_loss(model_dir):
    cfg = config(old_logprobs="recompute", rollout_correction={"rejection": "geometric", "rejection_threshold": 1.2})
    with Learner(model_dir, cfg, in_process=True) as learner:
        samples = engine_logprobs(learner, make_batch())
        samples[0].old_logprobs[samples[0].prompt_len:] -= 1.0  # geometric-mean weight e^1: rejected
        tokens = sum(s.num_loss_tokens for s in samples)
        metrics = learner.update(samples)
        assert samples[0].num_loss_tokens == 0
        assert metrics["tokens"] == tokens - 7 and metrics["rollout/rejected_sequence_fraction"] == pytest.approx(0.2)


def test_logprobs_are_those_of_the_tempered_policy(model_dir):
    samples = make_batch()
    with Learner(model_dir, config(temperature=0.5), in_process=True) as learner:
        got = learner.compute_logprobs(samples)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    s = samples[2]
    with torch.no_grad():
        logits = model(torch.as_tensor(s.input_ids)[None]).logits[0]
    expected = (logits / 0.5).log_softmax(-1)
    np.testing.assert_allclose(got[2], [float(expected[t - 1, s.input_ids[t]]) for t in range(s.prompt_len, s.length)],
                               atol=1e-5)


# ----------------------------------------------------------------------------------------- aggregation


@pytest.mark.parametrize("loss", [
    {"agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": 16},
    {"agg_mode": "seq-mean-token-mean"},
    {"policy_loss": "gspo"},
    {"policy_loss": "cispo", "agg_mode": "seq-mean-token-sum"},
], ids=["dr-grpo", "seq-mean-token-mean", "gspo", "cispo"])
def test_aggregation_is_invariant_to_micro_batch_packing(model_dir, loss):
    out = {}
    for budget in (1000, 20):
        with Learner(model_dir, config(micro_batch_tokens=budget, loss=loss), in_process=True) as learner:
            samples = engine_logprobs(learner, make_batch())
            for s in samples:
                s.old_logprobs[s.prompt_len:] -= 0.01  # ratio off 1, so sequence ratios matter
            out[budget] = learner.update(samples)
    assert out[20]["micro_batches"] >= 4 and out[1000]["micro_batches"] == 1
    assert out[20]["loss"] == pytest.approx(out[1000]["loss"], rel=1e-5)
    assert out[20]["grad_norm"] == pytest.approx(out[1000]["grad_norm"], rel=1e-5)
