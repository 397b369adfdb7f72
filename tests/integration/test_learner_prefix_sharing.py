"""Prefix-tree sharing and zero-advantage skipping on the tiny model: the tree's layout, and that sharing or skipping
changes the time of an update, never its result (per-token log-probs, loss, gradients, weights after a step), full
model and LoRA, every loss aggregation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from deepspeed.utils import safe_get_full_grad

from agentforge.errors import ConfigError
from agentforge.learner import Learner, LearnerConfig, TurnSample
from agentforge.learner.packing import (
    collate_packed,
    pack_micro_batches,
    padding_stats,
    row_length,
    shard_indices_by_tokens,
)
from agentforge.objective.aggregate import AGG_MODES

pytestmark = pytest.mark.integration

VOCAB = 1000


def sample(ids: np.ndarray, prompt_len: int, advantage: float) -> TurnSample:
    n = len(ids)
    return TurnSample(input_ids=ids, loss_mask=np.r_[np.zeros(prompt_len, bool), np.ones(n - prompt_len, bool)],
                      old_logprobs=np.zeros(n, np.float32), advantage=advantage, prompt_len=prompt_len)


def sokoban_shaped(seed: int = 0, zero_group: bool = False) -> list[TurnSample]:
    """Turns that share a system prompt; a group's turns share their first observation too; some responses start
    alike; one turn's prompt is an earlier turn's whole sequence plus more (a conversation); one exact duplicate.
    `zero_group`: the second group's advantages are exactly 0 (all its rollouts scored the same)."""
    rng = np.random.default_rng(seed)
    system = rng.integers(0, VOCAB, 14)
    out: list[TurnSample] = []
    for g in range(3):
        observation = rng.integers(0, VOCAB, 4 + g)
        for k in range(3):
            response = rng.integers(0, VOCAB, 3 + k)
            if k == 1:  # starts like the previous response
                response[:2] = out[-1].input_ids[-len(out[-1].response_ids):][:2]
            advantage = 0.0 if zero_group and g == 1 else float(rng.normal())
            out.append(sample(np.r_[system, observation, response], len(system) + len(observation), advantage))
    earlier = out[0].input_ids
    follow_up = np.r_[earlier, rng.integers(0, VOCAB, 3), rng.integers(0, VOCAB, 4)]
    out.append(sample(follow_up, len(follow_up) - 4, 0.7))
    out.append(sample(out[4].input_ids.copy(), out[4].prompt_len, -0.3))
    out.append(sample(rng.integers(0, VOCAB, 12), 8, 0.4))  # shares nothing
    return out


def copies(samples: list[TurnSample]) -> list[TurnSample]:
    return [TurnSample(s.input_ids.copy(), s.loss_mask.copy(), s.old_logprobs.copy(), s.advantage, s.prompt_len)
            for s in samples]


def config(**overrides) -> LearnerConfig:
    return LearnerConfig.from_mapping({"lr": 1e-3, "micro_batch_tokens": 48, **overrides})


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir) -> str:
    return str(tiny_model_dir)


# ---------------------------------------------------------------------------------------------------- layout


def test_a_prefix_tree_row_runs_shared_tokens_once_and_each_token_sees_its_own_context():
    rng = np.random.default_rng(3)
    prefix = rng.integers(0, VOCAB, 6)
    a = sample(np.r_[prefix, [1, 2, 3]], 7, 1.0)
    b = sample(np.r_[prefix, [1, 9, 9, 9]], 6, -1.0)  # shares 7 tokens with a, its prompt only 6
    c = sample(np.r_[a.input_ids, [5, 6]], len(a.input_ids), 0.5)  # a conversation's next turn: a, then more
    samples = [c, b, a]
    assert row_length(samples, [0, 1, 2], "prefix") == 6 + 1 + 2 + 2 + 3  # prefix, "1", a's 2, c's 2, b's 3
    assert row_length(samples, [0, 1, 2], "none") == sum(s.length for s in samples)
    batch = collate_packed(samples, [[0, 1, 2]], "cpu", "prefix")
    ids, positions, mask = batch.input_ids[0], batch.position_ids[0], batch.attention_mask[0, 0]
    assert ids.shape[0] == 14
    # lexicographic layout a, c, b: prefix + "1 2 3" (a, 0-8), c's "5 6" (9-10), b's "9 9 9" (11-13)
    assert ids.tolist() == [*prefix.tolist(), 1, 2, 3, 5, 6, 9, 9, 9]
    assert positions.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 7, 8, 9]
    assert mask[11].tolist() == [True] * 7 + [False] * 4 + [True, False, False]  # b's first 9: prefix+1, itself
    assert mask[10].tolist() == [True] * 11 + [False] * 3  # c's 6 sees all of a and its own 5
    keep = batch.keep.tolist()
    predicting = [keep[k] for k in batch.source.tolist()]
    by_sample = {i: [p for p, s in zip(predicting, batch.sample, strict=True) if s == i] for i in range(3)}
    assert by_sample[2] == [6, 7]  # a's response "2 3" from positions of "1" and "2"
    assert by_sample[1] == [5, 6, 11, 12]  # b's "1 9 9 9": from the prefix's end, the shared "1", then its own
    assert by_sample[0] == [8, 9]  # c's "5 6": from a's last token, then its own "5"
    assert batch.target.tolist() == [2, 3, 5, 6, 1, 9, 9, 9]  # flat tokens in layout order a, c, b
    assert 0 not in keep and len(keep) == len(set(predicting))  # logits only where a response token is predicted


def test_packing_covers_every_sample_once_within_budget_and_shares_more_than_prompts():
    samples = sokoban_shaped()
    for budget in (24, 48, 200):
        for mode in ("prefix", "prompt", "none"):
            batches = pack_micro_batches(samples, budget, mode)
            assert sorted(i for b in batches for row in b for i in row) == list(range(len(samples)))
            for b in batches:  # a sample longer than the budget travels alone
                assert len(b) * max(row_length(samples, row, mode) for row in b) <= budget or \
                    (len(b) == 1 and len(b[0]) == 1)
    stats = {mode: padding_stats(samples, pack_micro_batches(samples, 200, mode), mode)
             for mode in ("prefix", "prompt", "none")}
    assert stats["prefix"]["row_tokens"] < stats["prompt"]["row_tokens"] < stats["none"]["row_tokens"]
    assert stats["none"]["row_tokens"] == sum(s.length for s in samples)
    for shards in (shard_indices_by_tokens(samples, 3, "prefix"), shard_indices_by_tokens(samples, 2, "prompt")):
        assert sorted(i for shard in shards for i in shard) == list(range(len(samples)))


def test_share_prompts_is_replaced_by_sharing_with_a_clear_error():
    with pytest.raises(ConfigError, match="learner.sharing"):
        LearnerConfig.from_mapping({"share_prompts": False})
    with pytest.raises(ConfigError, match="sharing"):
        LearnerConfig.from_mapping({"sharing": "tree"}).validate()


# ------------------------------------------------------------------------------------- the same update


def full_gradient(learner: Learner) -> torch.Tensor:
    params = [p for p in learner.rank0.engine.module.parameters() if p.requires_grad]
    return torch.cat([safe_get_full_grad(p).double().flatten() for p in params])


def update(model_dir: str, samples: list[TurnSample], cfg: LearnerConfig) -> dict:
    """Per-token log-probs, then (old log-probs = those, nudged so clipping acts) the gradient, then one step: its
    metrics and the exported weights."""
    with Learner(model_dir, cfg, in_process=True) as learner:
        logprobs = learner.compute_logprobs(samples)
        rng = np.random.default_rng(1)
        for s, lp in zip(samples, logprobs, strict=True):
            s.old_logprobs[s.prompt_len:] = lp + rng.normal(0, 0.3, len(lp)).astype(np.float32)
        rank = learner.rank0
        assert not isinstance(rank.accumulate_gradients(list(samples)), str)
        gradient = full_gradient(learner)
        rank._discard_gradients()
        metrics = learner.step(samples)
        return {"logprobs": logprobs, "gradient": gradient, "metrics": metrics,
                "weights": dict(learner.export_weights())}


def assert_same_update(a: dict, b: dict) -> None:
    for x, y in zip(a["logprobs"], b["logprobs"], strict=True):
        np.testing.assert_allclose(x, y, atol=2e-5)
    assert a["metrics"]["loss"] == pytest.approx(b["metrics"]["loss"], rel=1e-5, abs=1e-7)
    gap = float((a["gradient"] - b["gradient"]).norm() / b["gradient"].norm())
    assert gap < 1e-4, f"gradients differ by {gap:.2e} (relative)"
    assert a["metrics"]["grad_norm"] == pytest.approx(b["metrics"]["grad_norm"], rel=1e-4)
    assert_same_weights(a["weights"], b["weights"])


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    """Equal to 1e-5 but for a rare entry: Adam divides by sqrt(v), which magnifies float rounding where v ~ 0."""
    for name, tensor in b.items():
        diff = (a[name] - tensor).abs()
        assert int((diff > 1e-5).sum()) <= max(1, tensor.numel() // 2000), name
        assert float(diff.max()) < 1e-3, name


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("agg_mode", AGG_MODES)
def test_a_prefix_tree_gives_the_update_of_no_sharing(model_dir, lora, agg_mode):
    samples = sokoban_shaped()
    loss = {"agg_mode": agg_mode, "loss_scale_factor": 8.0}
    lora_cfg = {"enabled": lora, "rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]}
    results = {mode: update(model_dir, copies(samples), config(sharing=mode, loss=loss, lora=lora_cfg))
               for mode in ("prefix", "none")}
    assert results["prefix"]["metrics"]["micro_batches"] < results["none"]["metrics"]["micro_batches"]
    assert_same_update(results["prefix"], results["none"])


@pytest.mark.parametrize("agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_skipping_zero_advantage_samples_gives_the_same_update(model_dir, agg_mode):
    """A group whose advantages are all 0 is left out of forward and backward (the denominators still count it):
    the same loss, gradient and weights; and a later all-zero batch still moves the weights as Adam's momentum
    does without skipping."""
    samples = sokoban_shaped(zero_group=True)
    zeros = sum(s.advantage == 0.0 for s in samples)
    assert zeros == 3
    results, later = {}, {}
    for skip in (True, False):
        cfg = config(skip_zero_advantage=skip, loss={"agg_mode": agg_mode})
        assert cfg.zero_advantage_skippable() is skip
        batch = copies(samples)
        results[skip] = update(model_dir, batch, cfg)
        assert results[skip]["metrics"]["count/skipped_zero_advantage"] == (zeros if skip else 0)
        with Learner(model_dir, cfg, in_process=True) as learner:
            learner.step(copies(batch))
            idle = copies(batch)
            for s in idle:
                s.advantage = 0.0
            metrics = learner.step(idle)
            assert metrics["skipped"] == 0.0 and metrics["loss"] == 0.0
            later[skip] = dict(learner.export_weights())
    assert_same_update(results[True], results[False])
    assert_same_weights(later[True], later[False])
    moved = max(float((later[False][n] - results[False]["weights"][n]).abs().max()) for n in later[False])
    assert moved > 1e-4  # the all-zero step moved the weights (momentum), and skipping it moved them alike


def test_zero_advantage_samples_are_computed_where_skipping_would_not_be_exact():
    assert not config(loss={"kl_coef": 0.1}).zero_advantage_skippable()  # KL in the loss pulls without A
    assert not config(loss={"entropy_coef": 0.01}).zero_advantage_skippable()
    assert config(keep_reference=True).zero_advantage_skippable()  # a reference for KL in the reward
    assert not config(skip_zero_advantage=False).zero_advantage_skippable()
