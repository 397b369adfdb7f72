"""Where a stop string ends a response, by vLLM's rule (`include_stop_str_in_output=True`): the text is cut right
after the stop string that completes earliest, the token ids right after the token that completed it. Shared by the
HF engine and the replicas' interruptible generation, which both cut decoded text rather than let vLLM do it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def first_stop(text: str, stops: Sequence[str]) -> int | None:
    """End index of the stop string that completes earliest in `text` (vLLM's rule), or None."""
    ends = [text.find(s) + len(s) for s in stops if s and s in text]
    return min(ends) if ends else None


def first_stop_token(tokenizer: Any, ids: list[int], stops: Sequence[str]) -> int:
    """Index of the token whose decoding first completes a stop string (binary search: prefixes only grow); call it
    only when the decoding of all of `ids` holds one."""
    lo, hi = 0, len(ids) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if first_stop(tokenizer.decode(ids[: mid + 1], skip_special_tokens=True), stops) is not None:
            hi = mid
        else:
            lo = mid + 1
    return lo


def cut_at_stop(tokenizer: Any, ids: list[int], stops: Sequence[str]) -> tuple[list[int], str, bool]:
    """(ids, text, stopped): `ids` and their decoding (special tokens skipped) cut after the first stop string."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    if not stops or first_stop(text, stops) is None:
        return ids, text, False
    ids = ids[: first_stop_token(tokenizer, ids, stops) + 1]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    end = first_stop(text, stops)
    return ids, text[:end] if end is not None else text, True
