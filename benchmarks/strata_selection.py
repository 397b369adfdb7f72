"""Time StraTA's diverse strategy rollout per task: embedding σ·N candidate strategies, then farthest-point selection.

The paper reports selection in milliseconds per task; this measures both parts on this machine, side by side, at the
paper's σ = 8, N = 4 (32 candidates) and the CPU recipes' σ = 4, N = 2 (8 candidates), and at larger σ·N, with the
real all-MiniLM-L6-v2 (bundled package, no download). Selection is also compared with a random pick of N, the
"no oversampling" cost floor, as a ratio.

Run: `.venv/bin/python benchmarks/strata_selection.py [--repeats 5]`.
Writes benchmarks/results/strata_selection.json and prints one summary line. Best of `repeats` per measurement.
"""

from __future__ import annotations

import argparse
import random

import numpy as np
from _report import publish

from agentforge.algorithms.strategy_selection import (
    StrategyEmbedder,
    embedding_available,
    farthest_point_selection,
    mean_pairwise_cosine,
)
from agentforge.hardware import describe
from benchmarks.advantages import best_of

SETTINGS = [(4, 2), (8, 4), (8, 8), (16, 8)]  # (sigma, N): the CPU recipes, the paper, larger
VERBS = ["push", "walk", "move", "go", "step"]
DIRECTIONS = ["up", "down", "left", "right"]
OBJECTS = ["the box", "the crate", "around the wall", "to the target", "past the corner"]


def strategy_texts(count: int, seed: int = 0) -> list[str]:
    """Plans shaped like SmolLM2's Sokoban strategies (~30 tokens), varied so embeddings differ."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        steps = [f"{rng.choice(VERBS)} {rng.choice(DIRECTIONS)} {rng.choice(OBJECTS)}"
                 for _ in range(rng.randint(2, 4))]
        texts.append("First " + ", then ".join(steps)
                     + f"; stop once the box is on the target (try {rng.randint(1, 9)}).")
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not embedding_available():
        raise SystemExit("the embedding model is not installed: pip install -e '.[strata]' (or make setup)")
    embedder = StrategyEmbedder()
    embedder.encode(["warm up"])  # load the model once, outside the timings
    rows = []
    for sigma, n in SETTINGS:
        candidates = sigma * n
        texts = strategy_texts(candidates)
        embed_s = best_of(args.repeats, lambda texts=texts: embedder.encode(texts))
        emb = embedder.encode(texts)
        select_s = best_of(args.repeats, lambda emb=emb, n=n: farthest_point_selection(emb, n))
        picker = np.random.default_rng(0)
        random_s = best_of(args.repeats,
                           lambda emb=emb, n=n, picker=picker: picker.choice(len(emb), size=n, replace=False))
        kept = farthest_point_selection(emb, n)
        rows.append({
            "sigma": sigma, "n": n, "candidates": candidates, "dims": int(emb.shape[1]),
            "embed_ms": round(embed_s * 1e3, 3), "select_ms": round(select_s * 1e3, 4),
            "random_pick_ms": round(random_s * 1e3, 4), "select_over_random": round(select_s / random_s, 1),
            "select_share_of_embed_plus_select": round(select_s / (embed_s + select_s), 4),
            "cosine_all": round(mean_pairwise_cosine(emb), 4),
            "cosine_kept": round(mean_pairwise_cosine(emb[kept]), 4),
        })
    result = {"repeats": args.repeats, "model": embedder.model_name, "settings": rows,
              "hardware": describe("float32 (sentence-transformers on CPU), float64 (selection)")}
    parts = [f"σ{r['sigma']}·N{r['n']}: embed {r['embed_ms']:.0f} ms + select {r['select_ms']:.2f} ms "
             f"(cos {r['cosine_all']:.2f}→{r['cosine_kept']:.2f})" for r in rows]
    publish("strata_selection", result, f"strategy selection per task (best of {args.repeats}): " + "; ".join(parts))


if __name__ == "__main__":
    main()
