"""Time TJPO's advantages (GiGPO + descriptor + diversity credit) against GiGPO alone on the same synthetic batch.

Run: `.venv/bin/python benchmarks/tjpo_credit.py [--groups 1250 --group-size 8 --turns 10 --dim 36]`.
Writes benchmarks/results/tjpo_credit.json and prints one line with the overhead ratios. Best of 3 per measurement,
all measured in the same process one after the other, so the ratio is what to read on a noisy machine.
"""

from __future__ import annotations

import argparse
import platform

import numpy as np
from _report import publish

from agentforge.algorithms import GiGPO, make_algorithm
from agentforge.algorithms.descriptors import DESCRIPTORS, Descriptor
from agentforge.hardware import describe
from agentforge.types import Trajectory
from benchmarks.advantages import best_of, synthetic_groups


def anchor_histogram(dim: int):
    """A descriptor of `dim` bins: which anchors a trajectory passed through (hash-bucketed), like spatial coverage."""

    def describe(trajectory: Trajectory) -> np.ndarray:
        counts = np.zeros(dim)
        for turn in trajectory.turns:
            counts[hash(turn.anchor) % dim] += 1
        return counts

    return describe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1250)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--dim", type=int, default=36)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    DESCRIPTORS.register("bench_anchor_histogram")(Descriptor("bench_anchor_histogram", anchor_histogram(args.dim)))
    groups = synthetic_groups(args.groups, args.group_size, args.turns)
    gigpo = GiGPO()
    timings = {"gigpo_s": best_of(args.repeats, lambda: gigpo.advantages(groups))}
    for functional in ("pairwise", "determinantal"):
        tjpo = make_algorithm({"name": "tjpo", "descriptor": "bench_anchor_histogram", "functional": functional})
        timings[f"tjpo_{functional}_s"] = best_of(args.repeats, lambda tjpo=tjpo: tjpo.advantages(groups))
    turns = args.groups * args.group_size * args.turns
    result = {
        "turns": turns, "groups": args.groups, "group_size": args.group_size, "turns_per_trajectory": args.turns,
        "descriptor_dim": args.dim, "repeats": args.repeats, **{k: round(v, 6) for k, v in timings.items()},
        "pairwise_over_gigpo": round(timings["tjpo_pairwise_s"] / timings["gigpo_s"], 3),
        "determinantal_over_gigpo": round(timings["tjpo_determinantal_s"] / timings["gigpo_s"], 3),
        "python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine(),
        "hardware": describe("float64 (numpy)"),
    }
    publish("tjpo_credit", result,
        f"TJPO advantages over {turns} turns, {args.groups} groups of {args.group_size} (best of {args.repeats}): "
        f"gigpo {timings['gigpo_s'] * 1e3:.0f} ms, tjpo pairwise {timings['tjpo_pairwise_s'] * 1e3:.0f} ms "
        f"({result['pairwise_over_gigpo']:.2f}x), tjpo determinantal {timings['tjpo_determinantal_s'] * 1e3:.0f} ms "
        f"({result['determinantal_over_gigpo']:.2f}x)"
    )


if __name__ == "__main__":
    main()
