"""T2PO on real parts: the tiny fp32 model in vLLM's CPU engine and in transformers, real Sokoban. The same signal
and the same TTI decisions in both engines; a TDS rollout checked turn by turn; RFT and one training iteration
through the trainer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentforge.agent.prompts import prompt_for
from agentforge.agent.render import AgentConfig
from agentforge.algorithms import make_algorithm
from agentforge.algorithms.t2po import THINK_QUEUE
from agentforge.engines import make_engine
from agentforge.engines.interventions import InterventionSpec, register_token_pieces, self_calibrated_uncertainty
from agentforge.errors import ConfigError
from agentforge.hosting.pool import LocalEnvPool
from agentforge.learner import samples_from_groups
from agentforge.rollout.workflow import RolloutContext
from agentforge.schema.compose import compose_config
from agentforge.tasks import TaskSampler
from agentforge.types import LossRole, SamplingConfig

pytestmark = pytest.mark.integration

ALPHA = 0.4
SIGNAL_ATOL = 1e-3  # M mixes entropy/log|V| and 1 - p_max: both agree across engines to ~1e-5 (test_engine_uncertainty)
TEXTS = ["<think>", "Let me think about the box. <think>", "The quick brown fox jumps over the lazy dog. " * 6]
GREEDY_U = SamplingConfig(temperature=0.0, max_new_tokens=24, uncertainty=True)
ENV_OPTIONS = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 20}


@pytest.fixture(scope="module")
def engines(tiny_spec):
    vllm = make_engine("vllm", tiny_spec, {"dtype": "float32", "max_model_len": 1024, "kv_cache_space_gb": 0.25})
    hf = make_engine("hf", tiny_spec, {"dtype": "float32", "batch_size": 3})
    yield {"vllm": vllm, "hf": hf}
    vllm.close()
    hf.close()


def signal(completion, vocab: int) -> np.ndarray:
    return np.array([self_calibrated_uncertainty(h, p, vocab, ALPHA)
                     for h, p in zip(completion.entropy, completion.top_prob, strict=True)])


def tti_spec(tokenizer, vocab: int, epsilon: float, window: int, min_think_tokens: int) -> InterventionSpec:
    return InterventionSpec("think_plateau_stop", {
        "queue": tokenizer.encode(THINK_QUEUE, add_special_tokens=False), "vocab_size": vocab, "alpha": ALPHA,
        "epsilon": epsilon, "window": window, "min_think_tokens": min_think_tokens,
        "stop_texts": ["</think>", "<action>"], "pieces": register_token_pieces(tokenizer, vocab)})


def predicted_firing(m: np.ndarray, epsilon: float, window: int, min_think_tokens: int) -> int | None:
    streak = 0
    for t in range(1, len(m)):
        streak = streak + 1 if abs(m[t] - m[t - 1]) < epsilon else 0
        if t >= min_think_tokens and streak >= window:
            return t
    return None


def test_same_signal_and_same_tti_decisions_in_vllm_and_transformers(engines, tiny_tokenizer):
    prompts = [tiny_tokenizer.encode(text) for text in TEXTS]
    vocab = engines["vllm"].vocab_size
    assert vocab == engines["hf"].vocab_size
    plain = {name: engine.generate(prompts, GREEDY_U) for name, engine in engines.items()}
    queue = tiny_tokenizer.encode(THINK_QUEUE, add_special_tokens=False)
    fired_somewhere = False
    for row in range(len(prompts)):
        v, h = plain["vllm"][row], plain["hf"][row]
        assert v.token_ids == h.token_ids
        m_v, m_h = signal(v, vocab), signal(h, vocab)
        np.testing.assert_allclose(m_v, m_h, rtol=0, atol=SIGNAL_ATOL)
        # ε in the middle of the widest gap between the sorted |ΔM|: no engine's rounding can cross it
        diffs = np.sort(np.abs(np.diff(m_v)))
        gaps = np.diff(diffs)
        cut = int(np.argmax(gaps[: max(1, len(gaps) // 2 + 1)]))
        epsilon = float((diffs[cut] + diffs[cut + 1]) / 2)
        expected = predicted_firing(m_v, epsilon, window=1, min_think_tokens=2)
        spec = tti_spec(tiny_tokenizer, vocab, epsilon, window=1, min_think_tokens=2)
        for name, engine in engines.items():
            out = engine.generate([prompts[row]], GREEDY_U, [spec])[0]
            forced = [i for i, f in enumerate(out.forced_mask) if f]
            if expected is None:
                assert forced == [], (name, row)
                continue
            fired_somewhere = True
            last = min(len(out.token_ids), expected + len(queue))
            assert forced == list(range(expected, last)), (name, row, epsilon)
            assert out.token_ids[:expected] == v.token_ids[:expected]  # identical until the intervention
            assert out.token_ids[expected:last] == queue[: last - expected]
    assert fired_somewhere


@pytest.fixture(scope="module")
def ctx(engines):
    engine = engines["vllm"]
    pool = LocalEnvPool("sokoban", ENV_OPTIONS)
    config = AgentConfig(sampling=SamplingConfig(max_new_tokens=12), max_turns=3, history_length=0,
                         max_prompt_tokens=512)
    yield RolloutContext(engine, pool, prompt_for("sokoban"), config)
    pool.close()


@pytest.mark.parametrize("max_try", [2, 20])  # 20: above the workflow's default cap of 16 attempts per turn
def test_tds_regenerates_turns_from_the_same_state_and_never_trains_them(ctx, max_try):
    algorithm = make_algorithm({"name": "t2po", "eta": 1.0, "max_try": max_try, "min_think_tokens": 2,
                                "tti_window": 1, "tti_epsilon": 1.0})
    hooks_workflow = algorithm.workflow("train")
    tasks = TaskSampler("sokoban", "train").sample(2)
    result = hooks_workflow.run(ctx, tasks, 2)
    trajectories = [t for g in result.groups for t in g.trajectories]
    later_turns = sum(max(0, t.length - 1) for t in trajectories)
    discarded = [s for t in trajectories for s in t.spans]
    # η = 1: every later turn whose score moved at all is discarded max_try times, then kept (the authors' loop)
    assert result.metrics["t2po/tds_checked"] == later_turns > 0
    assert len(discarded) == result.stats.regenerated_turns == result.metrics["t2po/tds_regenerated"]
    assert len(discarded) == max_try * later_turns
    assert all(s.role == LossRole.NOT_TRAINED and s.kind == "discarded_turn" for s in discarded)
    for t in trajectories:
        for span in t.spans:  # regenerated from the same prompt as the kept turn
            assert span.prompt_ids == t.turns[span.turn_index].prompt_ids
        assert all("uncertainty" in turn.info and 0 <= turn.info["uncertainty"] <= 1 for turn in t.turns)
    # TTI with ε = 1 fires at position 2 of every turn that had not closed its thinking by then
    assert result.metrics["t2po/tti_rate"] > 0
    advantages = algorithm.advantages(result.groups)
    samples = samples_from_groups(result.groups, advantages, algorithm.span_advantages(result.groups), "t2po")
    assert len(samples) == sum(t.length for t in trajectories)  # the discarded attempts are not samples
    eval_result = algorithm.workflow("eval").run(ctx, tasks[:1], 1)
    assert eval_result.stats.regenerated_turns == 0 and "t2po/tds_checked" not in eval_result.metrics


def test_rft_keeps_only_what_passes_the_filter(ctx):
    from agentforge.commands.builders import without_name
    from agentforge.training.rft import rft_dataset

    cfg = compose_config(["recipe=t2po_sokoban", "model=tiny", "rft.num_tasks=2", "rft.group_size=2",
                          "rft.score=return", "rft.threshold=-1000", "rft.require_valid=false"])
    workflow = make_algorithm(cfg.algorithm).workflow("rollout")
    data = rft_dataset(cfg.rft, str(cfg.env.name), without_name(cfg.env), ctx, workflow)
    assert data.played == 4 and len(data.kept) == 4 and data.summary["rft/kept_rate"] == 1.0
    cfg.rft.threshold = 2.0  # no Sokoban return reaches it with score=won
    cfg.rft.score = "won"
    with pytest.raises(ConfigError, match=r"RFT kept none of 4 trajectories.*warm_start=\[expert,rft\]"):
        rft_dataset(cfg.rft, str(cfg.env.name), without_name(cfg.env), ctx, workflow)


def test_one_training_iteration_with_rft_warm_start(tmp_path, tiny_train_config):
    from agentforge.commands.train import build_trainer
    from agentforge.tracking.tracker import read_metrics

    build_trainer(tiny_train_config(
        "t2po_sokoban", "trainer.warm_start=rft", "rft.num_tasks=2", "rft.group_size=2", "rft.score=return",
        "rft.threshold=-1000", "rft.require_valid=false", "trainer.group_size=2", "agent.sampling.max_new_tokens=12",
        "algorithm.eta=1.0", "algorithm.max_try=1")).fit()
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    first = next(r for r in rows if r["iteration"] == 0)
    assert first["rft/kept"] == 4 and first["rft/steps"] >= 1 and np.isfinite(first["rft/loss"])
    row = next(r for r in rows if r["iteration"] == 1)
    for key in ("train/loss", "train/t2po/tti_rate", "train/t2po/tds_rate", "train/t2po/turn_uncertainty",
                "train/think_tokens_per_turn", "train/forced_turn_rate", "train/regeneration_rate",
                "eval/t2po/tti_rate"):
        assert key in row, key
    for split in ("train", "eval"):  # a mean over successes is logged only where something succeeded
        assert (f"{split}/tokens_per_success" in row) == (row[f"{split}/success_rate"] > 0)
    assert row["train/regenerated_turns"] == row["train/t2po/tds_regenerated"]


def test_rft_command_writes_a_model_the_trainer_can_start_from(tmp_path, tiny_model_dir):
    """`agentforge rft` with rft.student: the tiny model plays (the teacher), a perturbed copy of it (the student)
    is the one trained on the kept rollouts: SFT on a teacher's samples, sequence-level distillation."""
    import shutil
    import subprocess
    import sys

    import torch
    from safetensors.torch import load_file, save_file

    student = tmp_path / "student"
    shutil.copytree(tiny_model_dir, student)
    weights_file = next(student.glob("*.safetensors"))
    teacher_weights = load_file(weights_file)
    generator = torch.Generator().manual_seed(0)
    student_weights = {k: v + 0.05 * torch.randn(v.shape, generator=generator, dtype=v.dtype)
                       for k, v in teacher_weights.items()}
    save_file(student_weights, weights_file, metadata={"format": "pt"})
    run_dir = tmp_path / "rft"
    done = subprocess.run([
        sys.executable, "-m", "agentforge.cli", "rft", "recipe=t2po_sokoban", "model=tiny", "env_pool.kind=local",
        "model.dtype=float32", "engine.dtype=float32", "learner.dtype=float32", "rft.num_tasks=2",
        "rft.group_size=2", "rft.score=return", "rft.threshold=-1000", "rft.require_valid=false", "rft.batch_size=2",
        "agent.max_turns=2", "agent.sampling.max_new_tokens=12", f"hydra.run.dir={run_dir}", f"rft.student={student}",
    ], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rft/kept"] == 4 and summary["steps"] == 2  # one epoch of 4 kept trajectories in batches of 2
    assert summary["trained"].startswith("student@") and summary["played_by"] != summary["trained"]
    model = run_dir / "model"
    assert (model / "config.json").is_file() and any(model.glob("*.safetensors"))
    assert "model.init_from=" in done.stdout + done.stderr
    out = {k: v for f in model.glob("*.safetensors") for k, v in load_file(f).items()}

    def distance(a, b):
        return sum(float((a[k].float() - b[k].float()).norm()) for k in b if k in a)

    assert distance(out, student_weights) < distance(out, teacher_weights)  # the student was trained, not the teacher
