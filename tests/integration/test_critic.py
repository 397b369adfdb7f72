"""The learner's critic role on the tiny model (learner/critic.py): values per response token, the clipped value
loss fitting fixed targets, its checkpoint state, LoRA on its body, and token-level advantages in the policy loss."""

from __future__ import annotations

import numpy as np
import pytest

from agentforge.errors import AgentforgeError
from agentforge.learner import Learner, LearnerConfig, TurnSample

pytestmark = pytest.mark.integration


def batch(seed: int = 0) -> list[TurnSample]:
    rng = np.random.default_rng(seed)
    out = []
    for prompt, response in ((5, 7), (9, 3), (4, 10), (6, 6)):
        ids = rng.integers(0, 1000, prompt + response)
        out.append(TurnSample(input_ids=ids, loss_mask=np.r_[np.zeros(prompt, bool), np.ones(response, bool)],
                              old_logprobs=np.zeros(prompt + response, np.float32), advantage=0.0,
                              prompt_len=prompt))
    return out


def with_targets(learner: Learner, samples: list[TurnSample]) -> list[TurnSample]:
    """Returns +1 on the even samples' tokens and -1 on the odd ones', old values from the critic itself."""
    for k, (sample, values) in enumerate(zip(samples, learner.compute_values(samples), strict=True)):
        p = sample.prompt_len
        sample.old_values = np.r_[np.zeros(p, np.float32), values]
        sample.returns = np.r_[np.zeros(p, np.float32), np.full(len(values), 1.0 if k % 2 == 0 else -1.0)]
    return samples


def config(**overrides) -> LearnerConfig:
    return LearnerConfig.from_mapping({"lr": 1e-3, "micro_batch_tokens": 40,
                                       "critic": {"enabled": True, "lr": 3e-3, "cliprange_value": 10.0},
                                       **overrides})


def test_the_critic_fits_its_targets_and_its_checkpoint_restores_it(tiny_model_dir, tmp_path):
    samples = batch()
    with Learner(str(tiny_model_dir), config(), in_process=True) as learner:
        values = learner.compute_values(samples)
        assert [len(v) for v in values] == [7, 3, 10, 6] and all(np.isfinite(v).all() for v in values)
        losses = [learner.critic_step(with_targets(learner, samples))["critic/value_loss"] for _ in range(12)]
        assert losses[-1] < 0.3 * losses[0], losses
        fitted = learner.compute_values(samples)
        assert np.mean(fitted[0]) > 0 > np.mean(fitted[1])  # toward +1 and -1
        learner.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "critic").is_dir()
    with Learner(str(tiny_model_dir), config(), in_process=True) as resumed:
        assert not np.allclose(resumed.compute_values(samples)[0], fitted[0])  # a fresh head
        resumed.load(tmp_path / "ckpt")
        for got, want in zip(resumed.compute_values(samples), fitted, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-6)
    with Learner(str(tiny_model_dir), config(critic={"enabled": False}), in_process=True) as plain, \
            pytest.raises(AgentforgeError, match="no critic"):
        plain.compute_values(samples)


def test_a_lora_critic_trains_its_adapters_and_head_only(tiny_model_dir):
    cfg = config(lora={"enabled": True, "target_modules": ["q_proj", "v_proj"]})
    with Learner(str(tiny_model_dir), cfg, in_process=True) as learner:
        trained = [n for n, p in learner.rank0.critic.engine.module.named_parameters() if p.requires_grad]
        assert trained and all("lora_" in n or n.startswith("value_head") for n in trained)
        assert any(n.startswith("value_head") for n in trained)
        samples = batch()
        first = learner.critic_step(with_targets(learner, samples))["critic/value_loss"]
        for _ in range(5):
            last = learner.critic_step(with_targets(learner, samples))["critic/value_loss"]
        assert last < first


def test_token_advantages_replace_the_turns_and_a_sample_without_signal_is_left_out(tiny_model_dir):
    def trained(token_level: bool) -> tuple[dict[str, float], dict]:
        with Learner(str(tiny_model_dir), LearnerConfig.from_mapping({"lr": 1e-2, "micro_batch_tokens": 64}),
                     in_process=True) as learner:
            samples = batch()[:3]
            for sample, logp in zip(samples, learner.compute_logprobs(samples), strict=True):
                sample.old_logprobs[sample.prompt_len:] = logp
            for sample, advantage in zip(samples, (0.7, -0.4, 0.0), strict=True):
                if token_level:  # the same advantage on every token; the turn's own is ignored
                    sample.token_advantages = np.r_[np.zeros(sample.prompt_len, np.float32),
                                                    np.full(sample.length - sample.prompt_len, advantage)]
                    sample.advantage = 99.0
                else:
                    sample.advantage = advantage
            metrics = learner.step(samples)
            return metrics, dict(learner.export_weights())

    turn_metrics, turn_weights = trained(False)
    token_metrics, token_weights = trained(True)
    assert token_metrics["count/skipped_zero_advantage"] == turn_metrics["count/skipped_zero_advantage"] == 1.0
    assert token_metrics["loss"] == pytest.approx(turn_metrics["loss"], abs=1e-6)
    for name, tensor in turn_weights.items():
        np.testing.assert_allclose(token_weights[name].numpy(), tensor.numpy(), atol=1e-6)
