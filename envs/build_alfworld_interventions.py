"""Build the ALFWorld intervention cases (TJPO paper appendix G) from a game split and write the case file.

  python envs/build_alfworld_interventions.py                 # first 15 tasks of bundled valid_unseen -> bundled file
  python envs/build_alfworld_interventions.py --splits valid_unseen valid_seen --dest /tmp/cases.jsonl.gz
  python envs/build_alfworld_interventions.py --data-source real --splits valid_unseen --dest cases.jsonl.gz

A game qualifies when its target can be fetched from two source categories (not the goal's, not the processing
tool's); the package's planner finds a plan through each with the other instances made unpickupable, and both
directions are replayed in the real game: original, User Constraints, Disruption, and after one rejected access
(agentforge/envs/alfworld/intervention_builder.py lists every check). Planner results are cached (--cache), so a rerun
takes seconds; the planner runs in a child process limited to --cpu-limit CPU seconds per call.
Run from the repo root with the venv's python (ALFWorld installed by scripts/install_alfworld.sh).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agentforge.envs.alfworld.games import ALFWORLD_SPLITS, GameSet  # noqa: E402
from agentforge.envs.alfworld.intervention_builder import MAX_LENGTH_GAP, PlanCache, build_cases  # noqa: E402
from agentforge.envs.alfworld.intervention_cases import BUNDLED_CASES, write_cases  # noqa: E402
from agentforge.envs.alfworld.task_types import short_name  # noqa: E402

DEFAULT_TASKS = 15  # the paper's suite size (30 cases); bundled valid_unseen has 23 qualifying tasks
DEFAULT_CACHE = Path.home() / ".cache" / "agentforge" / "alfworld-interventions" / "plans.json"


def _log(message: str) -> None:
    print(message, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--splits", nargs="+", default=["valid_unseen"], choices=ALFWORLD_SPLITS,
                        help="ALFWorld splits to draw tasks from, in order")
    parser.add_argument("--data-source", dest="data_source", default="bundled",
                        help="bundled, real, or a folder of games in the real format")
    parser.add_argument("--dest", type=Path, default=BUNDLED_CASES, help="the case file to write (.jsonl.gz)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="planner results, reused by reruns")
    parser.add_argument("--cpu-limit", dest="cpu_limit", type=float, default=20.0,
                        help="CPU seconds the planner may use per call")
    parser.add_argument("--max-gap", dest="max_gap", type=int, default=MAX_LENGTH_GAP,
                        help="largest difference between the two witness plans' lengths (the paper: 2)")
    parser.add_argument("--max-tasks", dest="max_tasks", type=int, default=DEFAULT_TASKS,
                        help="stop after this many tasks (default 15, the paper's suite; 0 = all that qualify)")
    args = parser.parse_args()

    games_set = GameSet(data_source=args.data_source)
    games = [game for split in args.splits for game in games_set.games(split)]
    report = build_cases(games, args.data_source, args.cpu_limit, args.max_gap, PlanCache(args.cache),
                         args.max_tasks or None, _log)
    if not report.cases:
        raise SystemExit("no game qualified; nothing written")
    written = write_cases(report.cases, args.dest)
    types = Counter(short_name(c.task_type) for c in report.cases if c.category < c.alternative_category)
    splits = Counter(c.game_split for c in report.cases if c.category < c.alternative_category)
    _log(f"wrote {written} cases of {report.tasks} tasks to {args.dest} "
         f"({args.dest.stat().st_size / 1024:.1f} KiB); tasks by type: "
         + ", ".join(f"{t} {n}" for t, n in sorted(types.items()))
         + "; by split: " + ", ".join(f"{s} {n}" for s, n in sorted(splits.items())))
    _log(f"games looked at: {report.games_seen} of {len(games)}; not admitted: "
         + ", ".join(f"{reason} {n}" for reason, n in report.rejected.most_common())
         + f"; {report.planner_calls} planner calls, {report.seconds:.0f} s")


if __name__ == "__main__":
    main()
