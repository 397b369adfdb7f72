"""Per-episode scheduling against lockstep play, measured: rollout wall time of the same episodes under both.

    python benchmarks/schedule.py [--tasks 4] [--group 2] [--turns 8] [--repeats 2] [--skip-alfworld]

The same episodes: every turn's response is forced (a fixed think text and an action chosen from the admissible
ones by episode and turn), so both schedules play the same env steps and generate the same number of tokens through
SmolLM2 in the in-process vLLM engine (2 threads; and on 2 replicas × 1 thread for the slower Sokoban); only the
order of work differs. Envs run in a Ray pool (2 workers). Workloads: ALFWorld (its own step times), and Sokoban
with injected heavy-tailed step latency (`env_pool.step_latency`, lognormal, σ = 1.0, medians 0.1 s and 0.5 s:
p90 = 3.6 × the median, p99 = 10 ×; reproducible per (task, step); `env_pool.step_threads=4`, so a worker's waiting
steps wait side by side under both schedules). `agent.straggler_wait` at its default (1.0).
One untimed warm-up rollout first; then lockstep and per-episode alternate `--repeats` times (medians).
Writes benchmarks/results/schedule.json and one summary line.
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib
from typing import Any

import torch
from _report import publish

from agentforge.commands.builders import build_engine, build_model_spec, build_pool, build_rollout_context
from agentforge.engines.interventions import InterventionSpec
from agentforge.hardware import describe
from agentforge.rollout.hooks import RolloutHooks
from agentforge.rollout.multi_turn import MultiTurnWorkflow
from agentforge.schema.compose import compose_config
from agentforge.tasks import TaskSampler

LATENCIES = (0.1, 0.5)  # Sokoban's injected step latency: lognormal medians (s), sigma 1.0, at most 5 s
THINK = "I look at the room and choose the next step carefully."


class ForcedPlay(RolloutHooks):
    """Every turn forced: the same episodes under any schedule (the action depends on episode and turn only)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def turn_intervention(self, episode: Any, ctx: Any) -> InterventionSpec:
        options = sorted(episode.observation.admissible) or ["look"]
        turn = len(episode.trajectory.turns)
        action = options[zlib.crc32(f"{episode.slot}:{turn}".encode()) % len(options)]
        ids = self.tokenizer.encode(f"<think>{THINK}</think><action>{action}</action>", add_special_tokens=False)
        return InterventionSpec("force_sequence", {"sequence": [*ids, self.tokenizer.eos_token_id],
                                                   "after_tokens": 0})


def measure(env: str, median_s: float | None, replicas: int | None, args: argparse.Namespace) -> dict[str, Any]:
    latency = {"dist": "lognormal", "median_s": median_s, "sigma": 1.0, "max_s": 5.0} if median_s else None
    env_options = ["env.dim_room=[6,6]", "env.max_steps=40"] if env == "sokoban" else []
    if latency:  # steps that wait (a web page, a tool): 4 threads per worker, so they wait side by side
        env_options.append("env_pool.step_latency={" + ",".join(f"{k}:{v}" for k, v in latency.items()) + "}")
        env_options.append("env_pool.step_threads=4")
    if replicas:
        env_options += [f"engine.replicas={replicas}", "engine.replica_cpus=1"]
    cfg = compose_config([
        f"env={env}", *env_options, "env_pool.kind=ray", "env_pool.num_workers=2", f"agent.max_turns={args.turns}",
        "agent.sampling.max_new_tokens=64", "agent.max_prompt_tokens=3500", "engine.max_model_len=4096",
    ])
    torch.set_num_threads(1 if replicas else 2)
    engine = build_engine(cfg, build_model_spec(cfg))
    pool = build_pool(cfg)
    tasks = TaskSampler(env, "eval").sample(args.tasks)
    walls: dict[str, list[float]] = {"lockstep": [], "per_episode": []}
    detail: dict[str, Any] = {}
    try:
        base = build_rollout_context(cfg, engine, pool)
        workflow = MultiTurnWorkflow(ForcedPlay(engine.tokenizer))
        workflow.run(base, tasks, args.group)  # warm-up, untimed
        for _ in range(args.repeats):
            for schedule in walls:
                ctx = base.with_sampling(base.config.sampling)
                ctx.config.schedule = schedule
                started = time.perf_counter()
                result = workflow.run(ctx, tasks, args.group)
                walls[schedule].append(time.perf_counter() - started)
                s = result.stats
                detail[schedule] = {"turns": s.turns, "env_steps": s.env_steps, "tokens": s.generated_tokens,
                                    "generate_seconds": round(s.generate_seconds, 3),
                                    "idle_seconds": round(s.idle_seconds, 3),
                                    "actions": [[t.action for t in tr.turns] for g in result.groups
                                                for tr in g.trajectories]}
    finally:
        pool.close()
        engine.close()
    same = detail["lockstep"]["actions"] == detail["per_episode"]["actions"]
    for d in detail.values():
        d.pop("actions")
    lock, per = statistics.median(walls["lockstep"]), statistics.median(walls["per_episode"])
    return {"env": env, "engine": f"{replicas} replicas x 1 thread" if replicas else "in-process, 2 threads",
            "episodes": args.tasks * args.group, "max_turns": args.turns, "same_episodes": same,
            "lockstep_s": round(lock, 2), "per_episode_s": round(per, 2), "speedup": round(lock / per, 2),
            "walls": walls, "detail": detail,
            "latency": latency or f"{env}'s own step times"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-alfworld", action="store_true")
    args = parser.parse_args()
    workloads = [("sokoban", m, None) for m in LATENCIES] + [("sokoban", LATENCIES[-1], 2)]
    workloads += [] if args.skip_alfworld else [("alfworld", None, None)]
    out = {"machine": describe(), "straggler_wait": 1.0,
           "results": [measure(e, m, r, args) for e, m, r in workloads]}
    line = "; ".join(f"{r['env']} ({_latency(r)}, {r['engine']}) lockstep {r['lockstep_s']} s vs per-episode "
                     f"{r['per_episode_s']} s ({r['speedup']}x, same episodes: {r['same_episodes']})"
                     for r in out["results"])
    publish("schedule", out, f"schedule: {line}")


def _latency(result: dict[str, Any]) -> str:
    latency = result["latency"]
    return f"median {latency['median_s']} s step latency" if isinstance(latency, dict) else "own step times"


if __name__ == "__main__":
    main()
