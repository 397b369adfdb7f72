"""Time GRPO and GiGPO advantages on 100k synthetic turns: building the flat arrays and computing, separately.

Run: `.venv/bin/python benchmarks/advantages.py [--groups 1250 --group-size 8 --turns 10]`.
Writes benchmarks/results/advantages.json and prints one summary line. Best of 3 per measurement.
"""

from __future__ import annotations

import argparse
import platform
import random
import time
from collections.abc import Callable

import numpy as np
from _report import publish

from agentforge.algorithms import GRPO, GiGPO, TurnBatch
from agentforge.hardware import describe
from agentforge.types import Group, Task, Trajectory, Turn

ANCHOR_POOL = 12  # distinct anchors per group, so step groups repeat across trajectories and timesteps


def synthetic_groups(n_groups: int, group_size: int, turns: int, seed: int = 0) -> list[Group]:
    """Groups of text-anchored turns with rewards like a text game's (step cost, invalid penalty, rare wins)."""
    rng = random.Random(seed)
    groups = []
    for g in range(n_groups):
        task = Task(env="bench", seed=g)
        pool = [f"room {g}: you see a cabinet {k}, a drawer {k % 3}, and a countertop {k % 5}." for k in
                range(ANCHOR_POOL)]
        trajectories = []
        for i in range(group_size):
            turn_list = []
            for t in range(turns):
                valid = rng.random() > 0.1
                env_reward = 10.0 if t == turns - 1 and rng.random() < 0.3 else -0.1
                turn_list.append(Turn(
                    prompt_ids=[1] * 4, response_ids=[2] * 4, logprobs=[-0.1] * 4, forced_mask=[False] * 4,
                    response_text="<action>go</action>", action="go" if valid else None, valid=valid,
                    reward=env_reward - (0.0 if valid else 0.1), env_reward=env_reward,
                    anchor=pool[rng.randrange(ANCHOR_POOL)], observation="", done=t == turns - 1,
                ))
            trajectories.append(Trajectory(task=task, rollout_index=i, turns=turn_list))
        groups.append(Group(task=task, trajectories=trajectories))
    return groups


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1250)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    groups = synthetic_groups(args.groups, args.group_size, args.turns)
    batch = TurnBatch.from_groups(groups)
    algorithms = {
        "grpo": GRPO(),
        "gigpo": GiGPO(),
        "gigpo_std_turn": GiGPO(mode="mean_std_norm", episode_stats="turn"),
        "gigpo_similarity": GiGPO(similarity_threshold=0.95),
    }
    timings = {"build_s": best_of(args.repeats, lambda: TurnBatch.from_groups(groups))}
    for name, algo in algorithms.items():
        timings[f"{name}_compute_s"] = best_of(args.repeats, lambda algo=algo: algo.compute(batch))
    timings["gigpo_end_to_end_s"] = best_of(args.repeats, lambda: algorithms["gigpo"].advantages(groups))
    gigpo = algorithms["gigpo"]
    gigpo.compute(batch)
    result = {
        "turns": batch.n_turns,
        "groups": args.groups,
        "group_size": args.group_size,
        "turns_per_trajectory": args.turns,
        "anchors_per_group": ANCHOR_POOL,
        "repeats": args.repeats,
        **{k: round(v, 6) for k, v in timings.items()},
        "gigpo_metrics": gigpo.last_metrics,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "hardware": describe("float64 (numpy)"),
    }
    publish("advantages", result,
        f"advantages over {batch.n_turns} turns (best of {args.repeats}): build {timings['build_s'] * 1e3:.1f} ms, "
        f"grpo {timings['grpo_compute_s'] * 1e3:.1f} ms, gigpo {timings['gigpo_compute_s'] * 1e3:.1f} ms, "
        f"gigpo std/turn {timings['gigpo_std_turn_compute_s'] * 1e3:.1f} ms, "
        f"gigpo similarity {timings['gigpo_similarity_compute_s'] * 1e3:.1f} ms, "
        f"gigpo end-to-end {timings['gigpo_end_to_end_s'] * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
