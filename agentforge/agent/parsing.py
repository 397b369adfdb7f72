"""Parse `<think>…</think><action>…</action>` responses: strict first, then a relaxed fallback.

The relaxed fallback exists because small models rarely follow the format at first (FACTS: SmolLM2-135M wrote free
text in 96/96 samples). It still finds an action so there is something to learn from, but the turn is marked
invalid (format) and takes the invalid-action penalty.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache


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


@dataclass(frozen=True)
class TagSpan:
    """One `<name>body</name>` found in a response; `name` is the tag as the template spells it."""

    name: str
    body: str
    start: int
    end: int


@lru_cache(maxsize=64)
def _tag_regexes(tags: str) -> tuple[re.Pattern[str], re.Pattern[str], dict[str, str]]:
    """Opening and closing patterns for `tags` (alternatives `search|answer`), and casefolded name -> name."""
    names = tags.split("|")
    alternatives = "|".join(re.escape(n) for n in names)
    opening = re.compile(rf"<({alternatives})>", re.IGNORECASE)
    closing = re.compile(rf"</({alternatives})>", re.IGNORECASE)
    return opening, closing, {n.casefold(): n for n in names}


def find_tags(text: str, tags: str, first_only: bool = False) -> list[TagSpan]:
    """Every non-overlapping `<t>…</t>` (t one of `tags`, any case), leftmost first, body up to the first closing
    tag of the same name: what `re.finditer(r"<(t)>(.*?)</(?P=t)>")` finds, in linear time.

    Why not that regex: each unclosed opening tag makes it scan to the end of the text, so a 100k-character
    response of unclosed tags took seconds per parse (quadratic); here each tag is looked at once.
    """
    opening, closing, canonical = _tag_regexes(tags)
    closers: dict[str, list[int]] = {}
    ends: dict[int, int] = {}
    for found in closing.finditer(text):
        closers.setdefault(found.group(1).casefold(), []).append(found.start())
        ends[found.start()] = found.end()
    spans: list[TagSpan] = []
    position = 0
    for found in opening.finditer(text):
        key = found.group(1).casefold()
        starts = closers.get(key)
        if found.start() < position or not starts:
            continue
        index = bisect_left(starts, found.end())
        if index == len(starts):
            closers[key] = []  # no closing tag after this one, so none after any later opening tag either
            continue
        close = starts[index]
        spans.append(TagSpan(canonical.get(key, found.group(1)), text[found.end():close], found.start(), ends[close]))
        position = ends[close]
        if first_only:
            break
    return spans


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


def _closed_at_end(text: str, opened: re.Match[str], end: int, tags: str) -> TagSpan | None:
    """The span from `opened` to a closing tag of the same name that ends exactly at `end`, if there is one."""
    _, closing, canonical = _tag_regexes(tags)
    close = end - len(opened.group(1)) - 3
    if close < opened.end():
        return None
    found = closing.fullmatch(text, close, end)
    if found is None or found.group(1).casefold() != opened.group(1).casefold():
        return None
    return TagSpan(canonical.get(found.group(1).casefold(), found.group(1)), text[opened.end():close],
                   opened.start(), end)


def strict_parse(text: str, action_tag: str, require_think: bool) -> tuple[str | None, TagSpan] | None:
    """(think, action span) when the whole response is `<think>…</think><action>…</action>` (surrounding
    whitespace allowed; think optional unless `require_think`), else None. Linear time (see `find_tags`)."""
    start, end = _skip_space(text, 0), len(text.rstrip())
    think_open, think_close, _ = _tag_regexes("think")
    action_open = _tag_regexes(action_tag)[0]
    opened_think = think_open.match(text, start)
    if opened_think is not None:
        for closed in think_close.finditer(text, opened_think.end()):
            opened = action_open.match(text, _skip_space(text, closed.end()))
            span = _closed_at_end(text, opened, end, action_tag) if opened is not None else None
            if span is not None:
                return text[opened_think.end():closed.start()], span
    if require_think:
        return None
    opened = action_open.match(text, start)
    span = _closed_at_end(text, opened, end, action_tag) if opened is not None else None
    return (None, span) if span is not None else None


def _tagged_action(tag: str, content: str, action_tag: str, keep_whitespace: bool = False) -> str:
    """With alternative tags the tag is part of the action: `<search>q</search>` → `search[q]`; an empty tag gives no
    action (`search[]` would pass as a well formed turn that the env then refuses). `keep_whitespace` (code) keeps
    the body's lines and indentation, dropping only blank lines around it."""
    if "|" not in action_tag:
        return content
    body = content.strip("\r\n").rstrip() if keep_whitespace else content.strip()
    return f"{tag.lower()}[{body}]" if content.strip() else ""


def _canonical(action: str, admissible: list[str] | None, keep_whitespace: bool = False) -> tuple[str, bool]:
    """Map an action string to its admissible spelling (case and whitespace-insensitive); free-text actions have
    their whitespace collapsed unless `keep_whitespace` (code, where newlines and indentation are the program)."""
    if keep_whitespace and admissible is None:
        return action, bool(action.strip())
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
    keep_whitespace: bool = False,
) -> ParsedResponse:
    """Parse a response; never raises: malformed output becomes an invalid turn with a reason. `keep_whitespace`:
    the action's newlines and indentation are kept (a template for code says so)."""
    strict = strict_parse(text, action_tag, require_think)
    if strict:
        think, span = strict
        action, ok = _canonical(_tagged_action(span.name, span.body, action_tag, keep_whitespace), admissible,
                                keep_whitespace)
        error = "" if ok else f"action {action!r} is not admissible"
        return ParsedResponse(action if action else None, think, True, ok, error)

    tagged = find_tags(text, action_tag)
    thoughts = find_tags(text, "think", first_only=True)
    think = thoughts[0].body if thoughts else None
    if tagged:
        last = tagged[-1]
        action, ok = _canonical(_tagged_action(last.name, last.body, action_tag, keep_whitespace), admissible,
                                keep_whitespace)
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
