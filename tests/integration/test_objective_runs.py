"""The objective options through the whole training loop (tiny model, vLLM engine, DeepSpeed learner, Sokoban):
the KL reference after a warm start, training at a temperature other than 1, every option at once with resume, and
bad option values refused before anything loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentforge.commands.preflight import preflight
from agentforge.commands.train import build_trainer
from agentforge.errors import ConfigError
from agentforge.schema.compose import compose_config

pytestmark = pytest.mark.integration

BASE = [
    "recipe=debug", "command=train", "logger.wandb=false", "env_pool.kind=local", "seed=0", "model.dtype=float32",
    "engine.dtype=float32", "learner.dtype=float32", "env.dim_room=[6,6]", "env.max_steps=4", "agent.max_turns=2",
    "agent.sampling.max_new_tokens=16", "agent.history_length=0", "trainer.tasks_per_iteration=2",
    "trainer.group_size=4", "trainer.eval_before=false", "trainer.eval_every=0", "trainer.checkpoint_every=0",
    "learner.lr=1e-3",
]
WARM = ["trainer.warm_start=true", "sft.num_tasks=8", "sft.epochs=2", "sft.batch_size=8", "sft.lr=3e-2"]


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def train(run_dir: Path, *overrides: str) -> list[dict]:
    build_trainer(compose_config([*BASE, *overrides], run_dir=str(run_dir))).fit()
    return [r for r in rows(run_dir) if r["iteration"] >= 1]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_kl_to_the_reference_is_zero_at_the_first_rl_step_after_a_warm_start(tmp_path, lora):
    # LoRA on q_proj and v_proj alone: its pushes once gave NaN log-probs at times (k_proj's rows of vLLM's fused
    # qkv weight rebuilt from uninitialised memory; test_learner.py's fused-group test), so this is also the
    # end-to-end check that a partial LoRA push leaves the engine sound, on the suite's shared engine
    extra = ["learner.lora.enabled=true", "learner.lora.target_modules=[q_proj,v_proj]"] if lora else []
    first = train(tmp_path / "run", "trainer.iterations=1", "learner.loss.kl_coef=0.1", *WARM, *extra)[0]
    assert first["train/kl_ref"] == pytest.approx(0.0, abs=1e-6)  # was 0.036 (full) / 0.011 (LoRA) at this point


def test_training_at_temperature_07_trains_the_tempered_policy(tmp_path):
    # fp32 engine and learner: with the engine's tempered log-probs the first-step ratio is 1 (raw ones are far off)
    first = train(tmp_path / "run", "trainer.iterations=1", "agent.sampling.temperature=0.7")[0]
    assert first["train/logprob_mismatch"] < 1e-4 and first["train/clip_fraction"] == 0.0


def test_every_option_at_once_trains_checkpoints_and_resumes(tmp_path):
    options = [
        "learner.loss.policy_loss=gspo", "learner.old_logprobs=recompute", "learner.ppo_epochs=2",
        "learner.mini_batch_size=6", "learner.rollout_correction.is_level=sequence",
        "learner.rollout_correction.rejection=geometric", "reward.kl.coef=0.05", "reward.kl.target=0.01",
        "reward.kl.horizon=50", "trainer.checkpoint_every=1", *WARM,
    ]
    run_dir = tmp_path / "run"
    got = train(run_dir, "trainer.iterations=2", *options)
    assert len(got) == 2
    for row in got:
        for key in ("rollout/mismatch_k3", "rollout/is_weight_mean", "rollout/rejected_sequence_fraction",
                    "reward/kl/coef", "reward/kl/mean", "train/optimizer_steps", "train/clip_fraction_epoch_2"):
            assert key in row and row[key] == row[key], key  # present and not NaN
        assert row["rollout/mismatch_abs_max"] < 1e-4  # fp32 engine = fp32 learner
        assert row["train/optimizer_steps"] >= 2
    assert got[0]["reward/kl/coef"] == pytest.approx(0.05)
    assert got[1]["reward/kl/coef"] != got[0]["reward/kl/coef"]  # the adaptive controller moved beta
    checkpoint = run_dir / "checkpoints" / "iter_000002"
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["rewards"]["kl"]["value"] != got[1]["reward/kl/coef"]  # beta after the second update
    assert next(checkpoint.rglob("reference.safetensors"), None) is not None  # the warm start moved the reference
    resumed = train(run_dir, "trainer.iterations=3", f"resume={run_dir}", *options)
    assert [r["iteration"] for r in resumed] == [1, 2, 3]
    beta_after_two = got[1]["reward/kl/coef"]
    assert resumed[2]["reward/kl/coef"] != beta_after_two  # continued from the checkpointed beta, then moved


def test_ppo_trains_a_critic_beside_the_policy_checkpoints_and_resumes_it(tmp_path):
    """algorithm=ppo turns the learner's critic on: per-token GAE advantages (RAGEN's bi-level here), the critic's
    own steps and metrics, its state in the checkpoint and back on resume; a group of one is enough (no group
    baseline). With learner.critic.warmup_iterations=1 (verl's critic_warmup) iteration 1 steps the critic alone (no
    policy loss, nothing pushed to the engine, not an untrained iteration), iteration 2 both. The critic here is a
    separate, smaller model of the policy's family (learner.critic.path: hidden size 32 against the policy's 64)."""
    from agentforge.models.loading import resolve_model

    smaller = resolve_model({"name": "tiny", "hidden_size": 32, "dtype": "float32"}).path  # a separate critic
    run_dir = tmp_path / "run"
    options = ["algorithm=ppo", "trainer.group_size=1", "trainer.tasks_per_iteration=4", "trainer.checkpoint_every=1",
               "algorithm.level=bilevel", "learner.critic.warmup_iterations=1", f"learner.critic.path={smaller}"]
    first = train(run_dir, "trainer.iterations=1", *options)[0]
    for key in ("critic/value_loss", "critic/explained_variance", "critic/grad_norm", "critic/returns_mean"):
        assert key in first, key
    assert first["critic/value_loss"] == first["critic/value_loss"] and "train/skipped" not in first
    assert first["train/critic_warmup"] == 1.0 and "train/loss" not in first and first["time/sync"] == 0.0
    from transformers import AutoModel

    assert first["critic/parameters"] == sum(p.numel() for p in AutoModel.from_pretrained(smaller).parameters()) + 33
    assert next((run_dir / "checkpoints" / "iter_000001").rglob("critic"), None) is not None
    resumed = train(run_dir, "trainer.iterations=2", f"resume={run_dir}", *options)
    assert [r["iteration"] for r in resumed] == [1, 2] and "critic/value_loss" in resumed[1]
    assert "train/critic_warmup" not in resumed[1] and "train/loss" in resumed[1] and resumed[1]["train/skipped"] == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "untrained_iterations" not in summary


def test_dynamic_sampling_plays_more_rounds_when_groups_have_no_signal(tmp_path):
    """The tiny model fails every Sokoban room the same way: no group has signal, so every round is played and
    nothing is trained (said, not hidden); with signal it stops at the first round."""
    row = train(tmp_path / "run", "trainer.iterations=1", "trainer.dynamic_sampling.enabled=true",
                "trainer.dynamic_sampling.max_rounds=3")[0]
    played, dropped = row["dynamic/groups_played"], row["dynamic/groups_dropped"]
    assert row["dynamic/rounds"] == 3 or (row["dynamic/rounds"] < 3 and row["dynamic/groups_short"] == 0)
    assert played == 2 * row["dynamic/rounds"] and dropped == played - (2 - row["dynamic/groups_short"])
    if row["dynamic/groups_short"] == 2:
        assert row["train/skipped"] == 1.0 and row["train/samples"] == 0


@pytest.mark.parametrize("overrides,message", [
    (["agent.sampling.top_p=0.9"], "agent.sampling.top_p=0.9 \\(use 1.0\\)"),
    (["agent.sampling.repetition_penalty=1.1"], "repetition_penalty=1.1"),
    (["learner.loss.policy_loss=ppo"], "policy_loss='ppo' is unknown; use one of cispo, gspo, reinforce, vanilla"),
    (["learner.loss.agg_mode=sum"], "agg_mode='sum' is unknown"),
    (["learner.loss.kl_estimator=k4"], "kl_estimator='k4' is unknown"),
    (["learner.loss.eps_low=1.2"], "eps_low=1.2 must be in"),
    (["learner.ppo_epochs=0"], "ppo_epochs=0: must be >= 1"),
    (["learner.mini_batch_size=1000"], "mini_batch_size=1000 turns is not smaller than the largest possible batch"),
    (["learner.old_logprobs=recompute", "learner.rollout_correction.rejection=token",
      "learner.rollout_correction.rejection_threshold_lower=3"], "inverted or empty"),
    (["learner.rollout_correction.is_level=token"], "set learner.old_logprobs=recompute"),
    (["trainer.dynamic_sampling.enabled=true", "trainer.dynamic_sampling.max_rounds=1"], "retry budget"),
    (["trainer.dynamic_sampling.enabled=true", "trainer.dynamic_sampling.max_rounds=null"], "retry budget"),
    (["algorithm=trajevolve", "agent.sampling.temperature=0.8"], "set learner.old_logprobs=recompute"),
    (["agent.history=summary", "algorithm=ppo"], "set agent.summary.train=false"),
    (["agent.history=summary", "agent.schedule=per_episode"], "set agent.schedule=lockstep"),
])
def test_bad_objective_options_are_refused_before_anything_loads(tmp_path, overrides, message):
    cfg = compose_config([*BASE, "trainer.iterations=1", *overrides], run_dir=str(tmp_path / "run"))
    with pytest.raises(ConfigError, match=message):
        preflight(cfg)
