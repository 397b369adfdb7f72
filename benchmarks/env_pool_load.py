"""How the Ray env pool's cost grows with work: steps/s and peak memory at 8, 64 and 256 concurrent episodes.

    python benchmarks/env_pool_load.py [--episodes 8 64 256] [--steps 20] [--workers 2] [--repeats 3] [--env sokoban]

Each size is measured `--repeats` times (the median steps/s reported, all kept), each time with a fresh pool (the
trainer's default: 2 workers, envs spread by slot) that plays 3 warm-up turns, then `--steps` turns of a random
admissible action per episode (seeded per slot) from a new reset; only those batched `step` calls are timed, resets
are reported apart. The machine may be shared: the load average is saved. Peak memory is the driver plus every
process it started (Ray's gcs, raylet, agents, the env workers), summed RSS sampled every 0.1 s
(agentforge.reliability.rss). Writes benchmarks/results/env_pool_load.json (with the machine) and prints one
summary line.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from _report import publish
from env_pool import OPTIONS, Player, machine

from agentforge.hosting.pool import RayEnvPool, ensure_ray
from agentforge.reliability.rss import PeakTreeRSS, tree_rss

MB = 2**20


def measure(env: str, episodes: int, steps: int, workers: int) -> dict[str, Any]:
    """One pool, `episodes` slots, `steps` turns; steps/s, the turn's latency and the tree's peak memory."""
    load_before = os.getloadavg()[0]
    before = tree_rss(os.getpid())
    with PeakTreeRSS(interval=0.1) as peak:
        started = time.perf_counter()
        pool = RayEnvPool(env, OPTIONS[env], num_workers=workers)
        try:
            warm_up = Player(pool, env, episodes)  # actors and their first calls warm up outside the timing
            warm_up.reset()
            for _ in range(3):
                warm_up.turn()
            player = Player(pool, env, episodes)
            player.reset()
            for _ in range(steps):
                if not pool.active_slots:
                    break
                player.turn()
            faults = pool.fault_counts()
        finally:
            pool.close()
        total_s = time.perf_counter() - started
    report = player.report()
    return {**report, "episodes": episodes, "workers": workers, "turns": player.turns, "total_s": total_s,
            "peak_tree_rss_mb": peak.peak / MB, "tree_rss_before_mb": before / MB, "faults": faults,
            "load_average_1m": {"start": load_before, "end": os.getloadavg()[0]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="sokoban", choices=sorted(OPTIONS))
    parser.add_argument("--episodes", nargs="+", type=int, default=[8, 64, 256])
    parser.add_argument("--steps", type=int, default=20, help="turns per size (every active episode steps each turn)")
    parser.add_argument("--workers", type=int, default=2, help="Ray env workers (the trainer's default is 2)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh pools per size; the median is reported")
    args = parser.parse_args()
    ensure_ray(num_cpus=os.cpu_count())
    results = {}
    for n in args.episodes:
        runs = sorted((measure(args.env, n, args.steps, args.workers) for _ in range(args.repeats)),
                      key=lambda r: r["steps_per_s"])
        results[str(n)] = {**runs[len(runs) // 2], "steps_per_s_all": [r["steps_per_s"] for r in runs],
                           "peak_tree_rss_mb": max(r["peak_tree_rss_mb"] for r in runs)}
    report = {"config": vars(args), "machine": machine(), "results": results}
    parts = [f"x{n}: {r['steps_per_s']:.0f} steps/s, {r['turn_ms']:.1f} ms/turn, peak {r['peak_tree_rss_mb']:.0f} MB"
             for n, r in results.items()]
    publish("env_pool_load", report,
            f"env pool load, {args.env}, Ray {args.workers} workers, {report['machine']['cores']} cores "
            f"(load {os.getloadavg()[0]:.1f}): " + " | ".join(parts))


if __name__ == "__main__":
    main()
