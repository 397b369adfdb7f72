"""Asynchronous training on this machine, measured: episodes/hour and learner busy fraction, synchronous (k = 0)
vs k = 1 and k = 2, the same run otherwise.

    python benchmarks/asynchronous.py [--iterations 5] [--tasks 2] [--group 4] [--interrupt 16] [--block-size 32]

SmolLM2-135M, GRPO on Sokoban (6×6, 2 turns, 48 new tokens), one vLLM engine replica with 1 thread
(`engine.replica_cpus=1`) and the in-process DeepSpeed learner with 1 torch thread: the two share the 2 cores, one
each. Decoupled PPO in every run (`learner.old_logprobs=recompute`, token TIS) so only the schedule differs. The
first iteration of each run is excluded (start-up: the replica's first batch, DeepSpeed's first step). With
`--interrupt N`, two more k = 1 runs at `engine.block_size` 32: without and with `engine.interrupt_tokens=N` (pushes
landing inside generation: fresher tokens, measured as the mean version lag per trained token).
Writes benchmarks/results/asynchronous.json and one summary line.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import torch
from _report import metric_rows, publish

from agentforge.commands.train import build_trainer
from agentforge.hardware import describe
from agentforge.schema.compose import compose_config


def run(k: int, args: argparse.Namespace, engine: tuple[str, ...] = ()) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentforge-bench-async-") as tmp:
        cfg = compose_config([
            "recipe=grpo_sokoban", "command=train", "logger.wandb=false", "env_pool.kind=local", "seed=0",
            f"trainer.iterations={args.iterations}", f"trainer.tasks_per_iteration={args.tasks}",
            f"trainer.group_size={args.group}", "trainer.eval_every=0", "trainer.eval_before=false",
            "trainer.checkpoint_every=0", "trainer.warm_start=false", "agent.max_turns=2",
            "agent.sampling.max_new_tokens=48", "env.dim_room=[6,6]", "env.max_steps=10", "engine.replicas=1",
            "engine.replica_cpus=1", f"trainer.asynchronous.max_staleness={k}", "learner.old_logprobs=recompute",
            "learner.rollout_correction.is_level=token", *engine,
        ], run_dir=tmp)
        torch.set_num_threads(1)
        started = time.perf_counter()
        build_trainer(cfg).fit()
        total = time.perf_counter() - started
        rows = metric_rows(tmp)
    rows = [r for r in rows if "time/iteration" in r]
    timed = rows[1:]  # the first iteration pays the start-up
    wall = sum(r["time/iteration"] for r in timed)
    busy = sum(r["time/update"] + r["time/sync"] for r in timed)
    episodes = args.tasks * args.group * len(timed)
    return {"max_staleness": k, "engine": list(engine), "iterations_timed": len(timed), "wall_s": round(wall, 2),
            "episodes_per_hour": round(episodes / wall * 3600), "learner_busy": round(busy / wall, 3),
            "learner_wait_s": round(sum(r.get("async/learner_wait_s", r["time/rollout"]) for r in timed), 2),
            "staleness_mean": round(sum(r.get("async/staleness_mean", 0.0) for r in timed) / len(timed), 3),
            "token_staleness_mean": round(sum(r.get("async/token_staleness_mean", 0.0) for r in timed) / len(timed),
                                          3),
            "turns_spanning_versions": sum(r.get("async/turns_spanning_versions", 0.0) for r in timed),
            "mean_return": [round(r["train/mean_return"], 3) for r in rows], "total_s": round(total, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--interrupt", type=int, default=16, help="also k=1 with engine.interrupt_tokens=N (0: not)")
    parser.add_argument("--block-size", type=int, default=32, help="engine.block_size of the interrupt runs")
    args = parser.parse_args()
    results = [run(k, args) for k in (0, 1, 2)]
    if args.interrupt:  # k = 1 with pushes landing inside generation, and its control (the same block size)
        block = [f"engine.block_size={args.block_size}"]
        results += [run(1, args, (*block,)), run(1, args, (*block, f"engine.interrupt_tokens={args.interrupt}"))]
    base = results[0]["episodes_per_hour"]
    for r in results:
        r["speedup"] = round(r["episodes_per_hour"] / base, 2)
    out = {"machine": describe(), "threads": "replica 1, learner 1", "results": results}
    line = "; ".join(f"k={r['max_staleness']}{' ' + ' '.join(r['engine']) if r['engine'] else ''}: "
                     f"{r['episodes_per_hour']} episodes/h ({r['speedup']}x), learner busy {r['learner_busy']:.0%}, "
                     f"token staleness {r['token_staleness_mean']:.2f}" for r in results)
    publish("asynchronous", out, f"asynchronous: {line}")


if __name__ == "__main__":
    main()
