"""Held-out Sokoban success split by how far each room is from solved: the BFS solver's shortest solution length.

Why: on small generated rooms many held-out rooms are solved by one move (a random walk solves ~half of
`make demo`'s), so a success rate alone does not say whether an agent plans. Rooms that need 2, 3 or more moves do.
Each run's rooms are rebuilt from its config (room size, boxes, generation steps) and solved; per bucket it prints
success at the evals named, and the paired verdict between the first and the last (pooled over the runs given,
task by task, as scripts/pooled_verdict.py does).

    python scripts/sokoban_depth.py runs/sok_pos_gigpo_s0 [runs/... more seeds] [--evals 0,20] [--out depth.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from agentforge.envs.sokoban import SokobanEnv
from agentforge.envs.sokoban_solver import solve
from agentforge.evaluation.run_outcomes import run_outcomes
from agentforge.stats import paired_difference, wilson_interval
from agentforge.types import Task

ENV_KEYS = ("dim_room", "num_boxes", "max_steps", "num_gen_steps", "p_change_directions")
BUCKETS = ("1 move", "2 moves", "3+ moves", "unsolved by BFS")


def room_depths(run: Path, keys: list[str]) -> dict[str, str]:
    """Each held-out room's bucket, from the run's own env options."""
    env_cfg = OmegaConf.to_container(OmegaConf.load(run / "config.yaml").env, resolve=True)
    options = {k: env_cfg[k] for k in ENV_KEYS if k in env_cfg}
    env = SokobanEnv(**options)
    out = {}
    for key in keys:
        env_name, split, seed = key.split(":")[:3]
        env.reset(Task(env_name, int(seed), split))
        plan = solve(env)
        out[key] = BUCKETS[3] if plan is None else BUCKETS[min(len(plan), 3) - 1]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--evals", default=None, help="comma-separated evals (e.g. base,0,20); default: 0 and last")
    parser.add_argument("--split", default="test", choices=("test", "eval"),
                        help="the held-out split: test (claims; default) or eval")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    per_run = {run: run_outcomes(run, args.split) for run in args.runs}
    common = [k for k in next(iter(per_run.values())) if all(k in e for e in per_run.values())]
    names = args.evals.split(",") if args.evals else ["0", common[-1]]
    depths: dict[str, str] = {}
    pooled: dict[str, dict[str, list[bool]]] = {name: {} for name in names}
    for run, evals in per_run.items():
        keys = list(evals[names[0]])
        depths.update(room_depths(run, keys))
        for name in names:
            for task, won in evals[name].items():
                pooled[name].setdefault(task, []).extend(won)
    report: dict[str, Any] = {"runs": [str(r) for r in args.runs], "evals": names, "buckets": {}}
    header = " | ".join(f"eval {n}" for n in names)
    print(f"| rooms by shortest solution | rooms | {header} | paired: eval {names[0]} -> eval {names[-1]} |")
    print("| --- | --- |" + " --- |" * (len(names) + 1))
    for bucket in BUCKETS:
        tasks = [t for t, b in depths.items() if b == bucket]
        if not tasks:
            continue
        cells, rates = [], {}
        for name in names:
            wins = [w for t in tasks for w in pooled[name][t]]
            low, high = wilson_interval(sum(wins), len(wins))
            rates[name] = sum(wins) / len(wins)
            cells.append(f"{rates[name]:.1%} [{low:.0%}, {high:.0%}]")
        first = {t: pooled[names[0]][t] for t in tasks}
        last = {t: pooled[names[-1]][t] for t in tasks}
        diff = paired_difference(first, last)
        print(f"| {bucket} | {len(tasks)} | {' | '.join(cells)} | {diff.difference * 100:+.1f} "
              f"[{diff.low * 100:+.1f}, {diff.high * 100:+.1f}], {diff.direction} (p = {diff.p_value:.2g}) |")
        report["buckets"][bucket] = {"rooms": len(tasks), "success": rates, "paired": diff.to_json()}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
