"""The GPU paths that run where CUDA vLLM is absent (`make test-gpu`; skipped without CUDA): the HF engine generating
with log-probs on CUDA, DeepSpeed ZeRO-2 bf16 + LoRA and ZeRO-3 bf16 steps, a weight-group broadcast into a replica
process (NCCL with two GPUs, gloo from GPU tensors with one), and training iterations of a random-initialised
Qwen2.5-0.5B-shaped model (SmolLM2's tokenizer and vocabulary: no hub download). Figures go to
$AGENTFORGE_GPU_REPORT (JSON lines) for `scripts/gpu_report.py` -> docs/gpu.md. `scripts/gpu_check.sh` runs it all."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

# AGENTFORGE_GPU_SMOKE_CPU=1 runs the same code on the CPU with a 2-layer model: a check of the script's logic where
# no GPU is (what was done before it first met one), not a GPU measurement.
SMOKE = os.environ.get("AGENTFORGE_GPU_SMOKE_CPU") == "1"
DEVICE = "cpu" if SMOKE else "cuda"
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not (torch.cuda.is_available() or SMOKE),
                                                  reason="needs CUDA (make test-gpu on a GPU machine)")]

QWEN_0_5B = {"hidden_size": 896, "num_hidden_layers": 24, "intermediate_size": 4864, "num_attention_heads": 14,
             "num_key_value_heads": 2, "tie_word_embeddings": True}
if SMOKE:
    QWEN_0_5B = {**QWEN_0_5B, "hidden_size": 128, "num_hidden_layers": 2, "intermediate_size": 256,
                 "num_attention_heads": 4}


def sync() -> None:
    if not SMOKE:
        sync()


def peak_gib() -> float:
    return 0.0 if SMOKE else torch.cuda.max_memory_allocated() / 2**30


def report(name: str, **figures: float | str) -> None:
    path = os.environ.get("AGENTFORGE_GPU_REPORT")
    if path:
        with open(path, "a") as f:
            gpu = "cpu-smoke" if SMOKE else torch.cuda.get_device_name(0)
            f.write(json.dumps({"check": name, "gpu": gpu, **figures}) + "\n")


def tokenizer_folder() -> Path:
    configured = os.environ.get("AGENTFORGE_GPU_TOKENIZER")
    if configured:
        return Path(configured)
    from agentforge.models.loading import cache_root, smollm2_tokenizer_folder

    return smollm2_tokenizer_folder(cache_root() / "models")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    """Qwen2.5-0.5B's shapes, random weights, SmolLM2's tokenizer (so its vocabulary: 49,152 rows, not 151,936)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder())
    config = Qwen2Config(vocab_size=len(tokenizer), max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **QWEN_0_5B)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    out = tmp_path_factory.mktemp("qwen2.5-0.5b-shaped")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="module")
def spec(model_dir):
    from agentforge.models import ModelSpec

    return ModelSpec(path=model_dir, name="qwen2.5-0.5b-shaped", dtype="bfloat16")


def prompts(spec, n: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(spec.path)
    return [tokenizer.encode(f"Room {i}: push the box onto the target. Your move:", add_special_tokens=False)
            for i in range(n)]


def test_hf_engine_generates_on_cuda_with_log_probs(spec):
    from agentforge.engines import make_engine
    from agentforge.types import SamplingConfig

    engine = make_engine("hf", spec, {"device": DEVICE, "dtype": "bfloat16", "batch_size": 64})
    batch = prompts(spec, 64)
    sampling = SamplingConfig(max_new_tokens=64)
    engine.generate(batch[:8], sampling)  # warm-up, untimed
    sync()
    t0 = time.perf_counter()
    out = engine.generate(batch, sampling)
    sync()
    seconds = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for c in out)
    scored = engine.score(batch[:8], [c.token_ids for c in out[:8]])
    gap = max(float(np.max(np.abs(np.subtract(s, c.logprobs)))) for s, c in zip(scored, out[:8], strict=True))
    engine.close()
    report("hf engine generate (64 prompts x 64 tokens, bf16)", tokens_per_s=tokens / seconds,
           max_abs_logprob_gap_vs_score=gap)
    assert tokens > 0 and gap < 0.1  # bf16: generate and score run different kernels


def random_samples(n: int, prompt: int, response: int, seed: int = 0) -> list:
    from agentforge.learner import TurnSample

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ids = rng.integers(0, 1000, prompt + response)
        out.append(TurnSample(input_ids=ids, loss_mask=np.r_[np.zeros(prompt, bool), np.ones(response, bool)],
                              old_logprobs=np.zeros(prompt + response, np.float32),
                              advantage=float(1 - 2 * (i % 2)), prompt_len=prompt))
    return out


@pytest.mark.parametrize("zero_stage,lora", [(2, True), (3, False)], ids=["zero2-bf16-lora", "zero3-bf16-full"])
def test_deepspeed_steps_on_cuda(model_dir, zero_stage, lora):
    from agentforge.learner import Learner, LearnerConfig

    config = LearnerConfig.from_mapping({
        "lr": 1e-5, "dtype": "bfloat16", "zero_stage": zero_stage, "micro_batch_tokens": 4096,
        "lora": {"enabled": lora, "rank": 16, "alpha": 32, "target_modules": ["q_proj", "v_proj"]}})
    samples = random_samples(32, 128, 128)
    if not SMOKE:
        torch.cuda.reset_peak_memory_stats()
    with Learner(model_dir, config, in_process=True) as learner:
        learner.update(samples)  # warm-up step, untimed
        sync()
        t0 = time.perf_counter()
        metrics = learner.update(random_samples(32, 128, 128, seed=1))
        sync()
        step = time.perf_counter() - t0
        t0 = time.perf_counter()
        exported = learner.export_weights(only_changed=True, copy=False)
        export = time.perf_counter() - t0
    report(f"deepspeed update, ZeRO-{zero_stage} bf16{' + LoRA q,v r16' if lora else ''} (32 turns x 256 tokens)",
           step_s=step, tokens_per_s=32 * 256 / step, export_s=export,
           exported_mib=sum(t.numel() * t.element_size() for _, t in exported) / 2**20,
           peak_gpu_gib=peak_gib())
    assert np.isfinite(metrics["loss"]) and not metrics.get("skipped")


def _receive(port: int, backend: str, manifest, device: str, queue) -> None:
    from agentforge.engines.replicas.weight_group import WeightGroupMember

    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    member = WeightGroupMember("127.0.0.1", port, 1, 2, backend, 120)
    total = 0.0
    for bucket in member.receive(manifest):
        total += sum(float(t.float().sum()) for _, t in bucket)
    member.close()
    queue.put(total)


def test_a_weight_group_broadcast_reaches_a_replica_process(model_dir):
    import torch.multiprocessing as mp
    from transformers import AutoModelForCausalLM

    from agentforge.engines.replicas.weight_group import WeightGroupMember, free_port, plan_buckets

    two = not SMOKE and torch.cuda.device_count() >= 2
    backend, device = ("nccl", "cuda:1") if two else ("gloo", "cpu")  # NCCL refuses two ranks on one GPU
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to("cpu" if SMOKE else "cuda:0")
    named = [(n, p.detach()) for n, p in model.named_parameters()]
    manifest = plan_buckets(named, 256 * 2**20, 1)
    context = mp.get_context("spawn")
    queue = context.Queue()
    port = free_port()
    receiver = context.Process(target=_receive, args=(port, backend, manifest, device, queue))
    receiver.start()
    if not SMOKE:
        torch.cuda.set_device(0)
    sender = WeightGroupMember("127.0.0.1", port, 0, 2, backend, 120)
    t0 = time.perf_counter()
    sender.send(manifest, named)
    received = queue.get(timeout=300)
    seconds = time.perf_counter() - t0
    receiver.join(60)
    sender.close()
    expected = sum(float(t.float().sum()) for _, t in named)
    report(f"weight group broadcast into a replica process ({backend}{', GPU tensors via CPU' if not two else ''})",
           seconds=seconds, mib=manifest.nbytes / 2**20, gib_per_s=manifest.nbytes / 2**30 / seconds)
    assert received == pytest.approx(expected, rel=1e-6)


def test_training_iterations_of_a_real_shaped_model_on_cuda(spec):
    """Generate with the engine's log-probs, update, push: three iterations, the loop a run makes (without env and
    Hydra: this machine has neither installed)."""
    from agentforge.engines import make_engine
    from agentforge.learner import Learner, LearnerConfig, TurnSample
    from agentforge.types import SamplingConfig

    engine = make_engine("hf", spec, {"device": DEVICE, "dtype": "bfloat16", "batch_size": 64})
    config = LearnerConfig.from_mapping({"lr": 1e-5, "dtype": "bfloat16", "zero_stage": 2,
                                         "micro_batch_tokens": 8192})
    batch = prompts(spec, 64)
    sampling = SamplingConfig(max_new_tokens=64)
    times: dict[str, list[float]] = {"generate": [], "update": [], "sync": []}
    tokens = 0
    with Learner(spec.path, config, in_process=True) as learner:
        for _ in range(3):
            t0 = time.perf_counter()
            out = engine.generate(batch, sampling)
            times["generate"].append(time.perf_counter() - t0)
            tokens += sum(len(c.token_ids) for c in out)
            lengths = np.array([len(c.token_ids) for c in out], float)
            advantages = (lengths - lengths.mean()) / (lengths.std() + 1e-6)  # a made-up reward: length
            samples = [TurnSample(input_ids=[*p, *c.token_ids], loss_mask=[False] * len(p) + [True] * len(c.token_ids),
                                  old_logprobs=[0.0] * len(p) + list(c.logprobs), advantage=float(a),
                                  prompt_len=len(p)) for p, c, a in zip(batch, out, advantages, strict=True)]
            t0 = time.perf_counter()
            metrics = learner.update(samples)
            sync()
            times["update"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            engine.update_weights(learner.export_weights(only_changed=True, copy=False))
            sync()
            times["sync"].append(time.perf_counter() - t0)
            assert np.isfinite(metrics["loss"])
    engine.close()
    report("training iteration, Qwen2.5-0.5B-shaped, 64 turns x 64 tokens (HF engine + ZeRO-2 bf16, one GPU)",
           generate_tokens_per_s=tokens / sum(times["generate"]), update_s=float(np.median(times["update"][1:])),
           sync_s=float(np.median(times["sync"][1:])))
