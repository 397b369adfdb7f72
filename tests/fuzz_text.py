"""Hypothesis strategies for bad model output, shared by the parser and env fuzz tests, and the test profiles.

What a policy can write: any text (every code point but surrogates, which a tokenizer never decodes to), scripts
written right to left, zero-width and bidi controls, NUL, tag soup (unclosed, nested, mis-cased `<think>`,
`<action>`, `<search>`, `<answer>`, `<strategy>`, `<flagged>`), characters whose case folding is surprising (`ſ`,
the Kelvin sign, dotted `İ`), and huge outputs (100k+ characters).

Profiles: `ci` (the default: few examples, no deadline, so the whole fuzz suite takes about a minute) and `thorough`
(`HYPOTHESIS_PROFILE=thorough`, for a longer hunt).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

TAGS = ("think", "action", "search", "answer", "strategy", "flagged")
TAG_FRAGMENTS = [f"<{t}>" for t in TAGS] + [f"</{t}>" for t in TAGS] + [
    "<THINK>", "</Think>", "<Action>", "</ACTION>", "<ſearch>", "</search >", "< action>", "<action", "</",
    "<>", "</>", "<think><think>", "</action></action>",
]
ODD_TEXT = [
    "\x00", "\u200b", "\u200c", "\u200d", "\ufeff", "\u200e", "\u200f", "\u202e", "\u2066", "\u2069",
    "שלום עולם", "مرحبا بالعالم", "ſ", "\u212a", "İ", "ß", "ﬁ", "²", "٣", "🙂", "\U0010ffff", "\r\n", "\t",
    "\u2028", "\x1c", "\x85", "[", "]", "search[", "click[", "answer[", "]]", "{", "}", "{observation}", "%s",
    "\\", '"', "'", "step 1", ", ", "none", "9" * 50,
]
WORDS = ["up", "down", "left", "right", "go to cabinet 1", "buy now", "back to search", "look around", "open door",
         "the", "box", "red shoes"]

any_text = st.text(max_size=400)  # st.text never draws surrogates
fragments = st.one_of(st.sampled_from(TAG_FRAGMENTS), st.sampled_from(ODD_TEXT), st.sampled_from(WORDS),
                      st.text(max_size=12))
tag_soup = st.lists(fragments, max_size=40).map("".join)


@st.composite
def huge_text(draw: st.DrawFn, min_chars: int = 100_000) -> str:
    """A 100k+ character response: a drawn piece of tag soup (or one character) repeated."""
    piece = draw(st.one_of(st.lists(fragments, min_size=1, max_size=8).map("".join),
                           st.sampled_from(TAG_FRAGMENTS + ODD_TEXT)))
    piece = piece or "x"
    return piece * (min_chars // len(piece) + 1)


model_output = st.one_of(any_text, tag_soup, tag_soup, huge_text())


def wrap(body: st.SearchStrategy[str], tag: str) -> st.SearchStrategy[str]:
    """A well formed `<think>…</think><tag>body</tag>` response around an arbitrary body."""
    return st.tuples(any_text, body).map(lambda p: f"<think>{p[0]}</think><{tag}>{p[1]}</{tag}>")
