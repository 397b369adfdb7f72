"""A model response as HTML: its reasoning and action parts, with the characters forced by a decoding intervention
marked (they were put there without sampling and carry no loss, so a reader must be able to tell them apart)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)
ACTION = re.compile(r"<action>(.*?)(?:</action>|$)", re.DOTALL)


@dataclass(frozen=True)
class ResponseParts:
    """Character ranges [start, end) of the reasoning and of the action text inside a response (None: absent)."""

    reasoning: tuple[int, int] | None
    action: tuple[int, int] | None


def split_response(text: str) -> ResponseParts:
    """Where `<think>…</think>` and `<action>…</action>` hold their contents (an unclosed tag runs to the end)."""
    think = THINK.search(text)
    action = ACTION.search(text, think.end() if think else 0) or ACTION.search(text)
    return ResponseParts(think.span(1) if think else None, action.span(1) if action else None)


def forced_flags(length: int, ranges: Sequence[Sequence[int]]) -> list[bool]:
    flags = [False] * length
    for start, end in ranges:
        for i in range(max(0, int(start)), min(length, int(end))):
            flags[i] = True
    return flags


def marked(text: str, ranges: Sequence[Sequence[int]], start: int = 0, end: int | None = None) -> Markup:
    """`text[start:end]`, escaped, with forced characters wrapped in `<mark class="forced">`."""
    end = len(text) if end is None else end
    flags = forced_flags(len(text), ranges)
    out: list[str] = []
    i = start
    while i < end:
        j = i
        while j < end and flags[j] == flags[i]:
            j += 1
        piece = escape(text[i:j])
        out.append(f'<mark class="forced" title="forced by a decoding intervention (no loss)">{piece}</mark>'
                   if flags[i] else str(piece))
        i = j
    return Markup("".join(out))


def forced_token_count(turn: dict) -> int:
    return sum(int(b) - int(a) for a, b in (turn.get("forced") or {}).get("tokens", []))


def forced_char_ranges(turn: dict) -> list[list[int]]:
    return list((turn.get("forced") or {}).get("chars", []))
