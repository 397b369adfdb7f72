"""Learner step throughput on SmolLM2-135M: fp32 full model vs bf16 LoRA, one in-process DeepSpeed rank.

The dtypes are fixed, not `auto`: comparing these two settings is the point. On a CPU without native bf16 (no AMX or
AVX512-BF16) the bf16 setting only measures torch's emulation, many times slower; the result records the hardware.

    python benchmarks/learner_step.py [--samples 4] [--tokens 256] [--steps 3] [--zero-stage 0]

Each setting does one warm-up step, then `--steps` timed optimizer steps over `samples x tokens` tokens (half
prompt, half response). Writes benchmarks/results/learner_step.json and prints one summary line.
FACTS baseline (TRL GRPOTrainer, same CPU): ~25 s forward+backward for 8x4 completions fp32.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from _report import publish

from agentforge.hardware import describe
from agentforge.learner import Learner, LearnerConfig, TurnSample
from agentforge.models import resolve_model

SETTINGS = {
    "fp32_full": {"dtype": "float32", "lora": {"enabled": False}},
    "bf16_lora": {"dtype": "bfloat16", "lora": {"enabled": True}},
}


def make_samples(n: int, length: int, seed: int = 0) -> list[TurnSample]:
    rng = np.random.default_rng(seed)
    prompt = length // 2
    return [
        TurnSample(input_ids=rng.integers(0, 49152, length), loss_mask=np.r_[np.zeros(prompt, bool),
                   np.ones(length - prompt, bool)], old_logprobs=np.full(length, -10.0, np.float32),
                   advantage=float(rng.normal()), prompt_len=prompt)
        for _ in range(n)
    ]


def run(model_path: str, name: str, args: argparse.Namespace) -> dict[str, float]:
    cfg = LearnerConfig.from_mapping({**SETTINGS[name], "zero_stage": args.zero_stage, "lr": 1e-6,
                                      "micro_batch_tokens": args.samples * args.tokens})
    samples = make_samples(args.samples, args.tokens)
    t0 = time.perf_counter()
    learner = Learner(model_path, cfg, in_process=True)
    init_s = time.perf_counter() - t0
    try:
        learner.step(samples)  # warm-up
        times, cpu_times = [], []
        for _ in range(args.steps):
            t0, c0 = time.perf_counter(), time.process_time()
            learner.step(samples)
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
        t0 = time.perf_counter()
        exported = learner.export_weights()
        export_s = time.perf_counter() - t0
    finally:
        learner.close()
    step_s = float(np.median(times))
    return {
        "init_s": init_s, "step_s": step_s, "tokens_per_s": args.samples * args.tokens / step_s,
        "step_cpu_s": float(np.median(cpu_times)),  # robust to a busy machine, unlike wall time
        "export_s": export_s, "exported_tensors": len(exported),
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--zero-stage", type=int, default=0)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    model_path = resolve_model({"name": args.model}).path
    results = {name: run(model_path, name, args) for name in SETTINGS}
    speedup = results["bf16_lora"]["tokens_per_s"] / results["fp32_full"]["tokens_per_s"]
    hardware = describe("float32 (fp32_full) and bfloat16 (bf16_lora)")
    report = {"config": vars(args), "hardware": hardware, "results": results, "bf16_lora_over_fp32_full": speedup}
    publish("learner_step", report,
            f"learner step {args.samples}x{args.tokens} {args.model} ZeRO-{args.zero_stage} [{hardware['cpu_kind']}]: "
            f"fp32 full {results['fp32_full']['tokens_per_s']:.0f} tok/s ({results['fp32_full']['step_s']:.2f} s, "
            f"{results['fp32_full']['step_cpu_s']:.1f} CPU-s) | bf16 LoRA {results['bf16_lora']['tokens_per_s']:.0f} "
            f"tok/s ({results['bf16_lora']['step_s']:.2f} s, {results['bf16_lora']['step_cpu_s']:.1f} CPU-s) | "
            f"{speedup:.2f}x")


if __name__ == "__main__":
    main()
