"""Run one training run behind a claim and commit its outcomes: `agentforge train` in a fresh process, timed, then
`docs/results/<name>.json` (agentforge/evaluation/results.py).

    python scripts/claim_run.py --name sokoban_positions/gigpo_s0 --run-dir runs/claims/pos_gigpo_s0 -- \
        recipe=gigpo_sokoban_positions seed=0

An existing finished run (its summary.json written) is exported again without rerunning (`--wall` gives its wall
time then). scripts/claim_runs.sh lists every run the docs cite.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

from agentforge.evaluation.results import code_state, export_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the result's name (docs/results/<name with / as __>.json)")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--note", default="")
    parser.add_argument("--wall", type=float, default=None, help="wall seconds of an existing run (no rerun)")
    parser.add_argument("--commit", default=None, help="the commit an existing run ran (default: the one checked out)")
    parser.add_argument("overrides", nargs="*", help="the train command's key=value overrides")
    args = parser.parse_args()
    command = "agentforge train " + " ".join(shlex.quote(o) for o in args.overrides)
    wall = args.wall
    code = (args.commit, False) if args.commit else code_state()
    if not (args.run_dir / "summary.json").is_file():
        started = time.perf_counter()
        agentforge = Path(sys.executable).parent / "agentforge"
        done = subprocess.run([str(agentforge), "train", *args.overrides, f"hydra.run.dir={args.run_dir}"])
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{command} failed ({done.returncode}); see {args.run_dir}/console.log")
    elif wall is None:
        raise SystemExit(f"{args.run_dir} is finished: give its wall time with --wall to export it again")
    path = export_result(args.run_dir, args.name, command, float(wall), args.note, code=code)
    print(f"{args.name}: {wall / 60:.1f} min -> {path}")


if __name__ == "__main__":
    main()
