"""Generate ALFWorld games from the package's real floor plans and bundle the planner-solved ones.

  python envs/alfworld/generate_games.py generate --split train --count 600      # resumable
  python envs/alfworld/generate_games.py pack                                    # write the bundled set
  python envs/alfworld/generate_games.py all                                     # both, default sizes

`generate` writes real-format game folders (traj_data.json, initial_state.pddl, game.tw-pddl) under --out and
solves each with the package's planner expert; rerunning it skips finished games, so it can be stopped and resumed
and the result does not depend on how often it was. `pack` turns games 0..N-1 of each split into
agentforge/envs/alfworld/games/<split>.jsonl.gz (only the game-specific parts). Same seed, same games.
Run from the repo root with the venv's python (ALFWorld installed by scripts/install_alfworld.sh).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agentforge.envs.alfworld.games import BUNDLED_DIR, bundle_path, load_bundle  # noqa: E402
from agentforge.envs.alfworld.generator import SplitStats, generate_game, pack_split  # noqa: E402
from agentforge.envs.alfworld.task_types import COLUMNS, short_name  # noqa: E402

SEED = 0
CPU_LIMIT = 20.0  # typical games need 1-3 CPU s; a few two-object games search for minutes
SPLIT_SIZES = {"train": 600, "valid_seen": 80, "valid_unseen": 80}
DEFAULT_OUT = Path.home() / ".cache" / "agentforge" / "alfworld-games"  # outside the repo: large


def _log(message: str) -> None:
    print(message, flush=True)


def _generate_stride(out: str, seed: int, split: str, indices: list[int], cpu_limit: float) -> SplitStats:
    stats = SplitStats()
    for index in indices:
        generate_game(Path(out), seed, split, index, cpu_limit, stats, _log)
        done = stats.solved + stats.reused
        if done % 10 == 0:
            _log(f"[{split}] {done}/{len(indices)} games of this worker (solved {stats.solved}, reused "
                 f"{stats.reused}, failed attempts {stats.failed}, planner {stats.planner_seconds:.0f} s)")
    return stats


def generate(out: Path, seed: int, split: str, start: int, count: int, cpu_limit: float, workers: int) -> None:
    indices = list(range(start, start + count))
    # Blocks of six consecutive games (one of each task type) per worker: two-object games are the slow ones.
    strides = [[i for i in indices if (i // 6) % workers == w] for w in range(workers)]
    started = time.perf_counter()
    total = SplitStats()
    if workers == 1:
        results = [_generate_stride(str(out), seed, split, indices, cpu_limit)]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_generate_stride, str(out), seed, split, s, cpu_limit) for s in strides if s]
            results = [f.result() for f in futures]
    for stats in results:
        total.solved += stats.solved
        total.reused += stats.reused
        total.failed += stats.failed
        total.planner_seconds += stats.planner_seconds
    wall = time.perf_counter() - started
    rate = total.solved / wall * 60 if wall else 0.0
    _log(f"[{split}] games {start}..{start + count - 1}: {total.solved} solved now, {total.reused} already there, "
         f"{total.failed} failed attempts; {wall:.0f} s wall ({rate:.1f} new games/min)")


def print_stats(split: str, path: Path) -> None:
    """Games per task type, scenes and walkthrough lengths of one bundled split."""
    games = load_bundle(str(path), split)
    types = Counter(short_name(g.task_type) for g in games)
    lengths = [len(g.walkthrough or ()) for g in games]
    _log(f"[{split}] {len(games)} games ({path.stat().st_size / 1024:.0f} KiB): "
         + ", ".join(f"{c} {types[c]}" for c in COLUMNS[:-1])
         + f"; {len({g.floor_plan for g in games})} floor plans; walkthrough {min(lengths)}-{max(lengths)} steps, "
         f"mean {sum(lengths) / len(lengths):.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["generate", "pack", "all", "stats"])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the real-format game folders")
    parser.add_argument("--dest", type=Path, default=BUNDLED_DIR, help="folder for the bundled <split>.jsonl.gz")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--split", choices=sorted(SPLIT_SIZES), help="one split (default: all three)")
    parser.add_argument("--start", type=int, default=0, help="first game index (generate)")
    parser.add_argument("--count", type=int, help="games per split (default: train 600, valid_* 80)")
    parser.add_argument("--cpu-limit", dest="cpu_limit", type=float, default=CPU_LIMIT,
                        help="CPU seconds the planner may use per game (a game over it is replaced)")
    parser.add_argument("--workers", type=int, default=1, help="games solved in parallel")
    args = parser.parse_args()
    splits = [args.split] if args.split else list(SPLIT_SIZES)
    if args.command == "stats":
        for split in splits:
            print_stats(split, bundle_path(split, args.dest))
        return
    for split in splits:
        count = args.count or SPLIT_SIZES[split]
        if args.command in ("generate", "all"):
            generate(args.out, args.seed, split, args.start, count, args.cpu_limit, args.workers)
        if args.command in ("pack", "all"):
            written = pack_split(args.out, args.seed, split, count, bundle_path(split, args.dest))
            size = bundle_path(split, args.dest).stat().st_size
            _log(f"[{split}] packed {written} games into {bundle_path(split, args.dest)} ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
