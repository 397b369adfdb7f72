"""Why GiGPO's similarity grouping scores with rapidfuzz, not difflib: one-item changes in real ALFWorld observations.

verl-agent's `are_similar` uses `difflib.SequenceMatcher(None, a, b).ratio()`, whose automatic junk heuristic (on by
default for texts of 200+ characters) drops every character that occurs more than 1 % + 1 times from match
seeding; on long observations a match can then miss whole stretches and the score collapses. rapidfuzz's
`fuzz.ratio` (normalised Indel similarity, 2·LCS / (|a| + |b|), on the same 0-1 scale / 100) has no heuristic.

Plays the walkthroughs of the first 40 bundled train games, then changes one listed item per observation three ways
(number +1, renamed, removed) and counts scores under 0.95 (verl-agent's default threshold).
Run: `python scripts/gigpo_similarity_check.py` (~1 min on 2 cores).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable

from rapidfuzz import fuzz

from agentforge.envs.alfworld.env import AlfWorldEnv
from agentforge.types import Task

ITEM = re.compile(r"\b(?:a|an) ([a-z]+) (\d+)(, | and |\.|,)")
CHANGES: dict[str, Callable[[str, re.Match[str]], str]] = {
    "number +1": lambda t, m: t[: m.start(2)] + str(int(m.group(2)) + 1) + t[m.end(2):],
    "renamed": lambda t, m: t[: m.start(1)] + "tomato" + t[m.end(1):],
    "removed": lambda t, m: t[: m.start()] + t[m.end() - len(m.group(3)) + (2 if m.group(3) == ", " else 0):],
}


def observations(games: int = 40) -> list[str]:
    env = AlfWorldEnv()
    seen: set[str] = set()
    try:
        for seed in range(games):
            seen.add(env.reset(Task("alfworld", seed, "train")).text)
            for action in env.game.walkthrough or ():
                seen.add(env.step(action).observation.text)
    finally:
        env.close()
    return sorted(seen)


def main() -> None:
    texts = observations()
    print(f"{len(texts)} distinct observations; one listed item changed, observations of 200+ characters:")
    print("| change | pairs | difflib < 0.95 | difflib min | rapidfuzz < 0.95 | rapidfuzz min |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, change in CHANGES.items():
        rows = []
        for text in texts:
            if len(text) < 200:
                continue
            for match in ITEM.finditer(text):
                other = change(text, match)
                if other != text:
                    rows.append((difflib.SequenceMatcher(None, text, other).ratio(), fuzz.ratio(text, other) / 100))
        print(f"| {name} | {len(rows)} | {sum(d < 0.95 for d, _ in rows)} | {min(d for d, _ in rows):.2f} | "
              f"{sum(r < 0.95 for _, r in rows)} | {min(r for _, r in rows):.3f} |")


if __name__ == "__main__":
    main()
