"""A small BM25 index over short texts (bm25s), shared by the WebShop and search-QA envs.

Why our own tokenizer: the original WebShop searched with Lucene (pyserini), which needs Java 21 (not here). bm25s
scores with Lucene's BM25 formula; we feed it tokens from a Lucene-like analyzer of our own: lowercase word
tokens, English stop words removed, plurals folded by an "S-stemmer" (Lucene's EnglishMinimalStemmer rules) instead
of Porter stemming. Ranking ties break by document order so results never depend on sort stability.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from agentforge.errors import require

# Lucene's classic English stop set plus a few query fillers ("i need a ..." instructions).
_STOP_WORDS_TEXT = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with i me my we our you your am im i'm i'd want need looking find buy some which"
)
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_TOKEN = re.compile(r"[a-z0-9]+")


def stem(word: str) -> str:
    """Fold English plurals (Lucene's EnglishMinimalStemmer): `ies`→`y`, `es`→`e`, `s`→`` with exceptions."""
    if len(word) < 3 or word[-1] != "s" or word[-2] in "us":
        return word
    if word[-2] == "e":
        if len(word) > 3 and word[-3] == "i" and word[-4] not in "ae":
            return word[:-3] + "y"
        if word[-3] in "iaoe":
            return word
    return word[:-1]


def analyze(text: str) -> list[str]:
    """Text → index terms: lowercase alphanumeric words, minus stop words, plurals folded."""
    return [stem(t) for t in _TOKEN.findall(text.lower()) if t not in STOP_WORDS]


class BM25Index:
    """BM25 (Lucene variant) over a fixed list of texts; `search` returns (document index, score) best first."""

    def __init__(self, texts: Sequence[str], k1: float = 0.9, b: float = 0.4) -> None:
        require("bm25s", "pip install bm25s")
        import bm25s

        if not texts:
            raise ValueError("a BM25 index needs at least one document")
        self.size = len(texts)
        self._retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._retriever.index([analyze(t) or [""] for t in texts], show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for `query` (0 where no query term occurs)."""
        terms = analyze(query)
        if not terms:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._retriever.get_scores(terms), dtype=np.float32)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """The top-k documents with a positive score; equal scores keep document order."""
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        order = hits[np.lexsort((hits, -scores[hits]))][:k]
        return [(int(i), float(scores[i])) for i in order]
