"""Exact-match scoring of answers, normalised as SQuAD / Search-R1 do: lowercase, no punctuation, no articles
(a, an, the), single spaces."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golden_answers: Iterable[str]) -> bool:
    """True when the normalised prediction equals any normalised golden answer."""
    predicted = normalize_answer(prediction)
    return any(predicted == normalize_answer(g) for g in golden_answers)
