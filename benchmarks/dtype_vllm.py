"""vLLM's CPU engine in bf16 and fp32, natively and under the AVX2 emulation: generated tokens/s of one batch.

    python benchmarks/dtype_vllm.py [--model smollm2-135m] [--batch 8] [--new-tokens 64] [--threads 1] [--repeats 3]

Answers "what does vLLM's CPU build do with bf16 on a CPU without AVX512-BF16?" as far as this machine can: each
(variant, dtype) runs in a fresh process (the variables are read when torch, oneDNN and vLLM start) through
agentforge's VLLMEngine (in-process, eager). Variants: `native`, and `avx2` = ATEN_CPU_CAPABILITY=avx2 +
ONEDNN_MAX_CPU_ISA=AVX2. vLLM picks its own kernel library and attention ISA from the CPU's flags, which no variable
changes (docs/dtype.md), so `avx2` emulates torch's and oneDNN's side only. Writes benchmarks/results/dtype_vllm.json
(with agentforge.hardware.describe() per run) and prints one line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from _report import hand_to_parent, publish, read_child

VARIANTS = {"native": {}, "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
DTYPES = ("float32", "bfloat16")
EMULATION_VARS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def child(args: argparse.Namespace) -> dict:
    """One engine in `args.dtype`: a warm-up, then one timed batch of `args.batch` chat prompts."""
    import torch

    from agentforge.engines import make_engine
    from agentforge.hardware import describe
    from agentforge.models import load_tokenizer, resolve_model
    from agentforge.types import SamplingConfig

    spec = resolve_model({"name": args.model, "dtype": args.dtype})
    tokenizer = load_tokenizer(spec)
    chats = [[{"role": "user", "content": f"Tell me a short story about the number {i}."}] for i in range(args.batch)]
    texts = [tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) for chat in chats]
    prompts = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    t0 = time.perf_counter()
    engine = make_engine("vllm", spec, {"dtype": args.dtype, "kv_cache_space_gb": 1, "max_model_len": 1024})
    init_s = time.perf_counter() - t0
    try:
        engine.generate(prompts[:1], SamplingConfig(max_new_tokens=4))  # warm-up
        runs = []  # (seconds, generated tokens) of each timed batch; the fastest counts (other jobs share the cores)
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            completions = engine.generate(prompts, SamplingConfig(temperature=1.0, max_new_tokens=args.new_tokens))
            runs.append((time.perf_counter() - t0, sum(len(c.token_ids) for c in completions)))
    finally:
        engine.close()
    best = max(tokens / seconds for seconds, tokens in runs)
    return {"dtype": args.dtype, "init_s": round(init_s, 2), "runs": runs, "tokens_per_s": round(best, 2),
            "prompt_tokens": sum(map(len, prompts)),
            "vllm_kernel_isa": "AVX512-BF16" if torch.cpu._is_avx512_bf16_supported() else
            "AVX-512" if torch.cpu._is_avx512_supported() else "AVX2",
            "hardware": describe(args.dtype)}


def run(variant: str, dtype: str, args: argparse.Namespace) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in EMULATION_VARS}
    env.update(VARIANTS[variant])
    env.update({"OMP_NUM_THREADS": str(args.threads), "VLLM_LOGGING_LEVEL": "ERROR"})
    command = [sys.executable, __file__, "--child", "--dtype", dtype, "--model", args.model, "--batch",
               str(args.batch), "--new-tokens", str(args.new_tokens), "--threads", str(args.threads),
               "--repeats", str(args.repeats)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    return {"variables": VARIANTS[variant], **read_child(out, f"{variant} {dtype}")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="timed batches per engine; the fastest counts")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        hand_to_parent(child(args))
        return
    from agentforge.hardware import describe

    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    results = {name: {dtype: run(name, dtype, args) for dtype in DTYPES} for name in names}
    hardware = describe("float32 and bfloat16")
    report = {"hardware": hardware, "config": {k: v for k, v in vars(args).items() if k not in ("child", "dtype")},
              "variants": results}
    cells = [f"{name} fp32 {r['float32']['tokens_per_s']:.0f} / bf16 {r['bfloat16']['tokens_per_s']:.0f} tok/s "
             f"(bf16/fp32 {r['bfloat16']['tokens_per_s'] / r['float32']['tokens_per_s']:.2f}, vLLM kernels "
             f"{r['bfloat16']['vllm_kernel_isa']})" for name, r in results.items()]
    publish("dtype_vllm", report,
            f"dtype_vllm {args.model} batch {args.batch} x {args.new_tokens} tokens, {args.threads} threads, "
            f"{hardware['cpu_model']} [{hardware['cpu_kind']}]: " + " | ".join(cells))


if __name__ == "__main__":
    main()
