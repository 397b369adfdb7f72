"""bf16 vs fp32 matmul speed on this CPU, natively and under the variables that make torch compute like another CPU.

    python benchmarks/dtype_matmul.py [--budget 1.0] [--threads 1] [--variants native,avx2]

Operations: a 1024x1024x1024 matmul, and the three matmuls of a SmolLM2-shaped linear layer (batch 256, 576 -> 1536,
the MLP's up projection) as autograd runs them: forward x @ W.T, input gradient g @ W, weight gradient g.T @ x.
They are timed separately because torch routes them differently: where bf16 is not native, a plain or transposed-A
bf16 matmul falls back to a slow reference kernel while x @ W.T does not. Variants (each in a fresh process, since
torch, oneDNN and MKL read the variables when they start):
  native           nothing set
  aten_avx2        ATEN_CPU_CAPABILITY=avx2 (torch's own vectorised kernels)
  onednn_avx2      ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN, which runs torch's bf16 matmuls)
  avx2             both of the above: the AVX2 emulation of docs/dtype.md
  avx512_no_bf16   ONEDNN_MAX_CPU_ISA=AVX512_CORE (an AVX-512 CPU without AVX512-BF16, e.g. Skylake-SP)
  avx2_mkl         avx2 + MKL_ENABLE_INSTRUCTIONS=AVX2 (MKL runs fp32 matmuls; not in the default list: on AMD
                   CPUs MKL runs its AVX2 code anyway, so it changes nothing there)
Each figure is the best of repeated runs within `--budget` seconds (a run slower than the budget is timed once).
One thread by default: per-core figures, and far steadier than two threads when other jobs share the cores.
Writes benchmarks/results/dtype_matmul.json (with agentforge.hardware.describe() of the machine and of each
variant's process) and prints one line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable

from _report import hand_to_parent, publish, read_child

VARIANTS: dict[str, dict[str, str]] = {
    "native": {},
    "aten_avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "onednn_avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx512_no_bf16": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
    "avx2_mkl": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}
DEFAULT_VARIANTS = ("native", "aten_avx2", "onednn_avx2", "avx2", "avx512_no_bf16")
EMULATION_VARS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
BATCH, HIDDEN, INTERMEDIATE = 256, 576, 1536  # SmolLM2-135M's MLP up projection on 256 tokens
OPS = ("matmul_1024", "linear_forward", "linear_grad_input", "linear_grad_weight")


def operations(dtype_name: str) -> dict[str, tuple[Callable[[], object], int]]:
    """name -> (the call, its FLOPs), on random tensors in `dtype_name`."""
    import torch

    dtype = getattr(torch, dtype_name)
    generator = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(dtype)

    a, b = rand(1024, 1024), rand(1024, 1024)
    x, weight, grad = rand(BATCH, HIDDEN), rand(INTERMEDIATE, HIDDEN), rand(BATCH, INTERMEDIATE)
    linear_flops = 2 * BATCH * HIDDEN * INTERMEDIATE
    return {
        "matmul_1024": (lambda: a @ b, 2 * 1024**3),
        "linear_forward": (lambda: torch.nn.functional.linear(x, weight), linear_flops),  # x @ W.T
        "linear_grad_input": (lambda: grad @ weight, linear_flops),
        "linear_grad_weight": (lambda: grad.t() @ x, linear_flops),
    }


def gflops(call: Callable[[], object], flops: int, budget: float) -> float:
    """Best GFLOP/s of `call` within `budget` seconds, after one warm-up run (oneDNN builds its kernel there)."""
    start = time.perf_counter()
    call()
    best = time.perf_counter() - start
    if best < budget:
        best, spent = float("inf"), 0.0
        while spent < budget:
            t0 = time.perf_counter()
            call()
            elapsed = time.perf_counter() - t0
            best, spent = min(best, elapsed), spent + elapsed
    return flops / best / 1e9


def child(budget: float, threads: int) -> dict:
    import torch

    from agentforge.hardware import describe

    torch.set_num_threads(threads)
    figures: dict[str, dict[str, float]] = {op: {} for op in OPS}
    for dtype in ("float32", "bfloat16"):
        for op, (call, flops) in operations(dtype).items():
            figures[op][dtype] = round(gflops(call, flops, budget), 2)
    return {"hardware": describe(), "gflops": figures}


def run_variant(name: str, budget: float, threads: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in EMULATION_VARS}
    env.update(VARIANTS[name])
    out = subprocess.run([sys.executable, __file__, "--child", "--budget", str(budget), "--threads", str(threads)],
                         env=env, capture_output=True, text=True, check=False)
    return {"variables": VARIANTS[name], **read_child(out, f"variant {name}")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of timed runs per figure")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        hand_to_parent(child(args.budget, args.threads))
        return
    from agentforge.hardware import describe

    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    results = {name: run_variant(name, args.budget, args.threads) for name in names}
    for result in results.values():
        for figures in result["gflops"].values():
            figures["bf16_over_fp32"] = round(figures["bfloat16"] / figures["float32"], 4)
    hardware = describe("float32 and bfloat16")
    report = {"hardware": hardware, "threads": args.threads, "budget_s": args.budget,
              "linear_shape": {"batch": BATCH, "in": HIDDEN, "out": INTERMEDIATE}, "variants": results}
    cells = []
    for name, result in results.items():
        ratios = " ".join(f"{result['gflops'][op]['bf16_over_fp32']:.2f}" for op in OPS)
        square = result["gflops"]["matmul_1024"]
        cells.append(f"{name} {square['float32']:.0f}/{square['bfloat16']:.1f} GFLOP/s, bf16/fp32 {ratios}")
    publish("dtype_matmul", report,
            f"dtype_matmul {hardware['cpu_model']} [{hardware['cpu_kind']}, torch {hardware['torch_cpu_capability']}], "
            f"{args.threads} threads; 1024^3 fp32/bf16 and bf16/fp32 speed ratio per op ({', '.join(OPS)}): "
            + " | ".join(cells))

if __name__ == "__main__":
    main()
