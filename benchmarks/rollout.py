"""Rollout throughput and the agent loop's overhead, on the same tasks in one run (ratios, since machines are noisy).

    python benchmarks/rollout.py [--tasks 8] [--group 4] [--model smollm2-135m] [--dtype auto] [--skip-alfworld]

Every figure excludes warm-up (one untimed rollout per engine first). Runs: Sokoban with vLLM (Ray env pool and
in-process pool) and with HF transformers (Ray pool); ALFWorld with vLLM
(both pools). Reports per run generated tokens/s, episodes/s, env steps/s, and the agent-loop overhead: the rollout's
wall time over the time spent generating its tokens (target <= 1.15x: the loop, prompt rendering, parsing and env
steps should cost little beside generation); and the ratios vLLM/HF and Ray pool/in-process pool.
`--dtype auto` (the default) is bf16 where the CPU computes it natively (AMX, AVX512-BF16), else fp32, as in a run.
Writes benchmarks/results/rollout.json (with the hardware and the dtype used) and prints one summary line.
"""

from __future__ import annotations

import argparse
from typing import Any

from _report import publish

from agentforge.algorithms import make_algorithm
from agentforge.commands.builders import build_engine, build_model_spec, build_pool, build_rollout_context
from agentforge.hardware import describe
from agentforge.rollout.metrics import rollout_summary
from agentforge.schema.compose import compose_config
from agentforge.tasks import TaskSampler


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The rollout workload this benchmark and benchmarks/replicas.py measure."""
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--alfworld-tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--skip-alfworld", action="store_true")


def env_options(env: str) -> list[str]:
    return ["env.dim_room=[6,6]", "env.max_steps=20"] if env == "sokoban" else []


def measured_rollout(cfg: Any, env: str, group: int, tasks: int, warmup_tasks: int = 1) -> Any:
    """The rollout of `tasks` eval tasks on a fresh engine and env pool (closed after), once an untimed warm-up
    rollout has run: a cold engine's first batch pays for allocation and kernel choice (timing it made vLLM's figure
    depend on run order: 125 tok/s first, 179 second, same workload; replicas varied 1.4x)."""
    engine = build_engine(cfg, build_model_spec(cfg))
    pool = build_pool(cfg)
    try:
        ctx = build_rollout_context(cfg, engine, pool)
        workflow = make_algorithm(cfg.algorithm).workflow("rollout")
        workflow.run(ctx, TaskSampler(env, "train").sample(warmup_tasks), group)
        return workflow.run(ctx, TaskSampler(env, "eval").sample(tasks), group)
    finally:
        pool.close()
        engine.close()


def run(env: str, engine_name: str, pool_kind: str, args: argparse.Namespace, tasks: int) -> dict[str, float]:
    cfg = compose_config([
        f"model={args.model}", f"model.dtype={args.dtype}", f"engine={engine_name}", f"env={env}", *env_options(env),
        f"env_pool.kind={pool_kind}", f"agent.max_turns={args.turns}", "agent.history_length=2",
        f"agent.sampling.max_new_tokens={args.max_new_tokens}", "agent.sampling.temperature=1.0",
        "agent.max_prompt_tokens=3500", *(["engine.max_model_len=4096"] if engine_name == "vllm" else []),
    ])
    result = measured_rollout(cfg, env, args.group, tasks)
    stats = result.stats
    summary = rollout_summary(result.groups, stats, result.metrics)
    summary["episodes_per_s"] = summary["episodes"] / stats.wall_seconds
    summary["generate_seconds"] = stats.generate_seconds
    summary["env_seconds"] = stats.env_seconds
    summary["agent_loop_overhead"] = stats.wall_seconds / max(stats.generate_seconds, 1e-9)
    summary["dtype"] = str(cfg.engine.dtype)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16")
    args = parser.parse_args()
    runs = {
        "sokoban/vllm/ray": run("sokoban", "vllm", "ray", args, args.tasks),
        "sokoban/vllm/local": run("sokoban", "vllm", "local", args, args.tasks),
        "sokoban/hf/ray": run("sokoban", "hf", "ray", args, args.tasks),
    }
    if not args.skip_alfworld:
        runs["alfworld/vllm/ray"] = run("alfworld", "vllm", "ray", args, args.alfworld_tasks)
        runs["alfworld/vllm/local"] = run("alfworld", "vllm", "local", args, args.alfworld_tasks)

    def ratio(a: str, b: str, key: str) -> float:
        return runs[a][key] / max(runs[b][key], 1e-9)

    ratios = {
        "sokoban_vllm_over_hf_tokens_per_s": ratio("sokoban/vllm/ray", "sokoban/hf/ray", "generated_tokens_per_s"),
        "sokoban_vllm_over_hf_episodes_per_s": ratio("sokoban/vllm/ray", "sokoban/hf/ray", "episodes_per_s"),
        "sokoban_ray_over_local_env_steps_per_s": ratio("sokoban/vllm/ray", "sokoban/vllm/local", "env_steps_per_s"),
    }
    if not args.skip_alfworld:
        ratios["alfworld_ray_over_local_env_steps_per_s"] = ratio("alfworld/vllm/ray", "alfworld/vllm/local",
                                                                  "env_steps_per_s")
    dtype = runs["sokoban/vllm/ray"]["dtype"]
    report = {"config": vars(args), "hardware": describe(dtype), "results": runs, **ratios}
    overhead = " ".join(f"{name} {r['agent_loop_overhead']:.2f}x" for name, r in runs.items())
    publish("rollout", report,
        f"rollout {args.tasks}x{args.group} {args.model} {dtype} [{report['hardware']['cpu_kind']}]: "
        f"vllm {runs['sokoban/vllm/ray']['generated_tokens_per_s']:.0f} tok/s vs hf "
        f"{runs['sokoban/hf/ray']['generated_tokens_per_s']:.0f} ({ratios['sokoban_vllm_over_hf_tokens_per_s']:.2f}x) "
        f"| agent-loop overhead (wall/generate): {overhead} | env steps/s ray/local: "
        + " ".join(f"{k.split('_')[0]} {v:.2f}x" for k, v in ratios.items() if "ray_over_local" in k)
    )


if __name__ == "__main__":
    main()
