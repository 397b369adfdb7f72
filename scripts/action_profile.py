"""How a policy moves in an eval: its actions' distribution, how often it repeats its last action, and how often a
turn changed nothing (the next observation equals this one), from an eval's trajectories.jsonl.

    python scripts/action_profile.py runs/<eval>/trajectories.jsonl [more.jsonl ...]

Why: a success rate alone does not say *why* a policy fails; a warm-started Sokoban agent that says `right` in 92 %
of its turns and walks into the same wall is a different problem (too few SFT steps) from one that moves well but
plans badly. Prints one line per file and writes nothing.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from itertools import pairwise
from pathlib import Path


def profile(path: Path) -> dict[str, object]:
    episodes = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    actions: Counter[str] = Counter()
    repeats = pairs = unchanged = steps = 0
    for episode in episodes:
        turns = episode["turns"]
        moves = [str(t.get("action")) for t in turns]
        actions.update(moves)
        pairs += max(len(moves) - 1, 0)
        repeats += sum(a == b for a, b in pairwise(moves))
        steps += max(len(turns) - 1, 0)
        unchanged += sum(a["observation"] == b["observation"] for a, b in pairwise(turns))
    total = sum(actions.values()) or 1
    return {"episodes": len(episodes), "won": sum(bool(e["won"]) for e in episodes),
            "actions": {a: round(n / total, 3) for a, n in actions.most_common()},
            "repeat_share": repeats / pairs if pairs else 0.0, "unchanged_share": unchanged / steps if steps else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    for path in parser.parse_args().files:
        p = profile(path)
        shares = ", ".join(f"{a} {s:.0%}" for a, s in p["actions"].items())
        print(f"{path}: {p['won']}/{p['episodes']} won · actions {shares} · repeats its last action "
              f"{p['repeat_share']:.0%} · turns that changed nothing {p['unchanged_share']:.0%}")


if __name__ == "__main__":
    main()
