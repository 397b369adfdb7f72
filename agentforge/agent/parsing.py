"""Parse `<think>…</think><action>…</action>` responses: strict first, then a relaxed fallback.

The relaxed fallback exists because small models rarely follow the format at first (FACTS: SmolLM2-135M wrote free
text in 96/96 samples). It still finds an action so there is something to learn from, but the turn is marked
invalid (format) and takes the invalid-action penalty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ParsedResponse:
    """The outcome of parsing one response.

    `action` is the canonical admissible action (or the raw tag content when the env has no admissible list);
    `format_ok` is True only for the strict format; `admissible` whether the action is allowed.
    """

    action: str | None
    think: str | None
    format_ok: bool
    admissible: bool
    error: str = ""

    @property
    def valid(self) -> bool:
        return self.format_ok and self.admissible and self.action is not None


def _tag_pattern(tag: str) -> re.Pattern[str]:
    """`tag` may list alternatives (`search|answer`); group `tag` says which one matched."""
    return re.compile(rf"<(?P<tag>{tag})>(?P<action>.*?)</(?P=tag)>", re.DOTALL | re.IGNORECASE)


def _tagged_action(tag: str, content: str, action_tag: str) -> str:
    """With alternative tags the tag is part of the action: `<search>q</search>` → `search[q]`."""
    return f"{tag.lower()}[{content.strip()}]" if "|" in action_tag else content


_STRICT_CACHE: dict[tuple[str, bool], re.Pattern[str]] = {}


def _strict_pattern(action_tag: str, require_think: bool) -> re.Pattern[str]:
    key = (action_tag, require_think)
    if key not in _STRICT_CACHE:
        think = r"<think>(?P<think>.*?)</think>\s*" if require_think else r"(?:<think>(?P<think>.*?)</think>\s*)?"
        _STRICT_CACHE[key] = re.compile(
            rf"^\s*{think}<(?P<tag>{action_tag})>(?P<action>.*?)</(?P=tag)>\s*$", re.DOTALL | re.IGNORECASE
        )
    return _STRICT_CACHE[key]


def _canonical(action: str, admissible: list[str] | None) -> tuple[str, bool]:
    """Map an action string to its admissible spelling (case and whitespace-insensitive)."""
    cleaned = " ".join(action.strip().split())
    if admissible is None:
        return cleaned, bool(cleaned)
    lookup = {" ".join(a.lower().split()): a for a in admissible}
    match = lookup.get(cleaned.lower())
    return (match, True) if match is not None else (cleaned, False)


def _mentioned_action(text: str, admissible: list[str]) -> str | None:
    """The admissible action mentioned last in free text (whole words), for the relaxed fallback."""
    best: tuple[int, str] | None = None
    lowered = text.lower()
    for action in admissible:
        for found in re.finditer(rf"(?<![\w-]){re.escape(action.lower())}(?![\w-])", lowered):
            if best is None or found.start() >= best[0]:
                best = (found.start(), action)
    return best[1] if best else None


def parse_response(
    text: str,
    admissible: list[str] | None,
    action_tag: str = "action",
    require_think: bool = True,
) -> ParsedResponse:
    """Parse a response; never raises: malformed output becomes an invalid turn with a reason."""
    strict = _strict_pattern(action_tag, require_think).match(text)
    if strict:
        action, ok = _canonical(_tagged_action(strict.group("tag"), strict.group("action"), action_tag), admissible)
        think = strict.group("think")
        error = "" if ok else f"action {action!r} is not admissible"
        return ParsedResponse(action if action else None, think, True, ok, error)

    tagged = list(_tag_pattern(action_tag).finditer(text))
    think_match = _tag_pattern("think").search(text)
    think = think_match.group("action") if think_match else None
    if tagged:
        last = tagged[-1]
        action, ok = _canonical(_tagged_action(last.group("tag"), last.group("action"), action_tag), admissible)
        error = "format: expected <think>…</think><action>…</action>" + ("" if ok else f"; {action!r} not admissible")
        return ParsedResponse(action if action else None, think, False, ok, error)
    if admissible:
        mentioned = _mentioned_action(text, admissible)
        if mentioned is not None:
            return ParsedResponse(mentioned, think, False, True, "format: no <action> tag; action found in free text")
    return ParsedResponse(None, think, False, False, "format: no action found")


THINK_CLOSE = "</think>"


def think_token_count(tokenizer: object, token_ids: list[int], text: str) -> int:
    """How many of a response's tokens are thinking: up to and including the one that completes `</think>`; the
    whole response when `<think>` is never closed; 0 when the response does not think at all.

    Counted on the engine's own token ids (the shortest prefix whose decoded text holds `</think>`, found by
    bisection: a few decodes per turn), so it is exact where re-tokenising the thinking text would not be.
    """
    lowered = text.lower()
    if THINK_CLOSE not in lowered:
        return len(token_ids) if "<think>" in lowered else 0
    decode = tokenizer.decode  # type: ignore[attr-defined]
    low, high = 1, len(token_ids)
    while low < high:
        mid = (low + high) // 2
        if THINK_CLOSE in decode(token_ids[:mid], skip_special_tokens=True).lower():
            high = mid
        else:
            low = mid + 1
    return high
