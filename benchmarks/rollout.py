"""Rollout throughput, vLLM vs HF engine, on the same Sokoban batch in one run (ratios, since machines are noisy).

    python benchmarks/rollout.py [--tasks 8] [--group 4] [--model smollm2-135m] [--dtype auto]

`--dtype auto` (the default) is bf16 where the CPU computes it natively (AMX, AVX512-BF16), else fp32, as in a run.
Writes benchmarks/results/rollout.json (with the hardware and the dtype used) and prints one summary line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentforge.algorithms import make_algorithm
from agentforge.builders import build_engine, build_model_spec, build_pool, build_rollout_context
from agentforge.config import compose_config
from agentforge.hardware import describe
from agentforge.rollout.metrics import rollout_summary
from agentforge.tasks import TaskSampler

RESULTS = Path(__file__).parent / "results"


def run_engine(engine_name: str, args: argparse.Namespace) -> dict[str, float]:
    cfg = compose_config([
        f"model={args.model}", f"model.dtype={args.dtype}", f"engine={engine_name}", "env_pool.kind=ray",
        f"agent.max_turns={args.turns}", f"agent.sampling.max_new_tokens={args.max_new_tokens}",
        "agent.sampling.temperature=1.0",
    ])
    spec = build_model_spec(cfg)
    engine = build_engine(cfg, spec)
    pool = build_pool(cfg)
    try:
        ctx = build_rollout_context(cfg, engine, pool)
        tasks = TaskSampler("sokoban", "eval").sample(args.tasks)
        result = make_algorithm(cfg.algorithm).workflow("rollout").run(ctx, tasks, args.group)
    finally:
        pool.close()
        engine.close()
    summary = rollout_summary(result.groups, result.stats, result.metrics)
    summary["episodes_per_s"] = summary["episodes"] / result.stats.wall_seconds
    summary["dtype"] = str(cfg.engine.dtype)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16")
    args = parser.parse_args()
    results = {name: run_engine(name, args) for name in ("vllm", "hf")}
    ratio_tok = results["vllm"]["generated_tokens_per_s"] / max(results["hf"]["generated_tokens_per_s"], 1e-9)
    ratio_eps = results["vllm"]["episodes_per_s"] / max(results["hf"]["episodes_per_s"], 1e-9)
    dtype = results["vllm"]["dtype"]
    report = {"config": vars(args), "hardware": describe(dtype), "results": results,
              "vllm_over_hf_tokens_per_s": ratio_tok, "vllm_over_hf_episodes_per_s": ratio_eps}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rollout.json").write_text(json.dumps(report, indent=2))
    print(
        f"rollout {args.tasks}x{args.group} {args.model} {dtype} [{report['hardware']['cpu_kind']}]: "
        f"vllm {results['vllm']['generated_tokens_per_s']:.0f} tok/s {results['vllm']['episodes_per_s']:.2f} ep/s | "
        f"hf {results['hf']['generated_tokens_per_s']:.0f} tok/s {results['hf']['episodes_per_s']:.2f} ep/s | "
        f"ratio tok/s {ratio_tok:.2f}x ep/s {ratio_eps:.2f}x"
    )


if __name__ == "__main__":
    main()
