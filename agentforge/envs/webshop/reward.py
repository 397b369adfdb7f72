"""WebShop's purchase reward, as the original defines it (FACTS "Environments"):

    R = r_type · (n_attr + n_opt + 1[price ≤ limit]) / (|goal attributes| + |goal options| + 1)

- attribute match: a product attribute with fuzzy score > 85, else the goal attribute as a substring of the title,
  bullet points or description (lowercased);
- option match: goal and chosen options colour-normalised, then fuzzy score > 85; each goal option counts once;
- r_type = 1, but 0.5 unless the query matches, ≥ 2 category levels are shared or the title score > 0.2;
  0.1 if the title score < 0.1 and 0 if it is 0. The title score is the share of the goal product's title nouns
  that the bought product's title also has.

Fuzzy score: the original calls thefuzz 0.19's `token_set_ratio` (its pin; no python-Levenshtein, so difflib's
SequenceMatcher computes each ratio), which first drops the characters U+0080-U+00FF, turns every non-word
character (regex `\W`: `_` is a word character, so "noise_cancelling" stays one token) into a space, lower-cases,
and rounds the best of its three ratios to an integer. `fuzzy_score` is that computation (no thefuzz dependency), so
"x-large" vs "large" or "7.5" vs "7" score 100 as in the original, and a raw 85.2 rounds to 85 and does not match.

Colour normalisation is the original's `normalize_color`: the first word of its colour list (in the list's order)
that occurs anywhere in the option, as a plain substring. So "navy-blue" → "blue", "a-black" → "black", and also the
original's quirks: "standard" → "tan", "dark blue" → "blue" ("blue" precedes "dark" in the list). Kept on purpose:
rewards must equal the original's.

Noun tagging replaces spaCy (not available offline): with a noun lexicon (the generated catalog ships
`noun_lexicon.json`, the nouns of its vocabulary, brands included) a title's nouns are its words in the lexicon;
without one (real data) they are its words that are not stop words, numbers, units or common adjectives/colours —
close to spaCy's NOUN/PROPN on product titles, which are mostly noun phrases. This is the one deliberate difference.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass
from difflib import SequenceMatcher
from typing import Any

from agentforge.envs.webshop.data import Goal, Product

FUZZY_THRESHOLD = 85

# The original's colour list (princeton-nlp/WebShop, web_agent_site/engine/normalize.py, COLOR_SET), in its order:
# the order decides which colour a multi-colour option maps to.
COLOR_WORDS = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass",
    "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light",
    "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow",
    "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone",
    "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white",
    "wine", "yellow",
)
# Colour adjectives for the title-noun fallback only (not the reward's colour list: "steel", "stone" or "tiger" are
# colours there but nouns in a title).
_TITLE_COLORS_TEXT = (
    "apricot aqua auburn azure beige black blonde blue blush bronze brown burgundy camel camo caramel champagne "
    "charcoal chocolate coffee copper coral cream crimson denim fuchsia gold gray green grey indigo ivory khaki "
    "lavender lilac lime magenta maroon mauve mint multicolor mustard navy nude olive orange peach pink plum purple "
    "red rose rust sage sand silver tan taupe teal turquoise violet walnut white wine yellow"
)

_TITLE_STOP_TEXT = (
    "a an and are as at be but by for from if in into is it its of on or per so the to with without up out "
    "new set pack count pcs piece pieces size inch inches in oz ounce ounces fl lb lbs pound pounds ft feet cm mm "
    "ml l kg g gb tb x xl xxl"
)
_ADJECTIVES_TEXT = (
    "small medium large big little long short tall high low light dark heavy soft hard hot cold warm cool new old "
    "best great good premium natural organic pure fresh free easy quick fast slow slim thin thick wide narrow "
    "extra super ultra mini portable wireless waterproof durable comfortable adjustable reusable lightweight "
    "compact classic modern vintage cute beautiful elegant simple stylish professional original assorted "
    "multi double single dual deep flat round square non anti"
)
TITLE_STOP_WORDS = frozenset(_TITLE_STOP_TEXT.split())
COMMON_ADJECTIVES = frozenset(_ADJECTIVES_TEXT.split()) | frozenset(_TITLE_COLORS_TEXT.split())
_WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")
_LATIN1_DROP = {code: None for code in range(128, 256)}  # thefuzz's `ascii_only` deletes exactly these


_NON_WORD = re.compile(r"(?ui)\W")


def fuzzy_process(text: str) -> str:
    """thefuzz 0.19's `full_process(force_ascii=True)`: drop U+0080-U+00FF, every non-word character to a space,
    lower-case, strip."""
    return _NON_WORD.sub(" ", str(text).translate(_LATIN1_DROP)).lower().strip()


def _ratio(a: str, b: str) -> int:
    """thefuzz 0.19's `ratio` without python-Levenshtein: equal strings 100, an empty one 0, else difflib's ratio
    (junk heuristic on, as `SequenceMatcher(None, a, b)`) ×100, rounded."""
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * SequenceMatcher(None, a, b).ratio()))


def fuzzy_score(a: str, b: str) -> int:
    """thefuzz 0.19's `token_set_ratio(a, b)`: the sorted common tokens, and each side's common + own tokens, compared
    pairwise; the best ratio."""
    first, second = fuzzy_process(a), fuzzy_process(b)
    if not first or not second:
        return 0
    tokens_a, tokens_b = set(first.split()), set(second.split())
    common = " ".join(sorted(tokens_a & tokens_b))
    with_a = f"{common} {' '.join(sorted(tokens_a - tokens_b))}".strip()
    with_b = f"{common} {' '.join(sorted(tokens_b - tokens_a))}".strip()
    return max(_ratio(common, with_a), _ratio(common, with_b), _ratio(with_a, with_b))


def fuzzy_match(a: str, b: str) -> bool:
    """The original's match test: integer score strictly above 85."""
    return fuzzy_score(a, b) > FUZZY_THRESHOLD


def title_nouns(title: str, lexicon: Collection[str] | None = None) -> list[str]:
    """The nouns of a product title (see the module doc for why this is not spaCy)."""
    words = _WORD.findall(title.lower())
    if lexicon is not None:
        return [w for w in words if w in lexicon]
    return [
        w for w in words
        if len(w) > 1 and not any(c.isdigit() for c in w) and w not in TITLE_STOP_WORDS and w not in COMMON_ADJECTIVES
    ]


@dataclass(frozen=True)
class TypeMatch:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(product: Product, goal: Goal, lexicon: Collection[str] | None = None) -> TypeMatch:
    """Is the bought product the *kind* of product asked for (query, category path, title nouns)?"""
    query_match = product.query == goal.query
    # empty levels count, as in the original ("a › b › " and "a › d › " share "a" and "": a match)
    bought_levels = {level.strip() for level in product.product_category.split("›")}
    goal_levels = {level.strip() for level in goal.product_category.split("›")}
    category_match = len(bought_levels & goal_levels) >= 2
    desired = title_nouns(goal.name, lexicon)
    bought = set(title_nouns(product.title, lexicon))
    title_score = 0.2 if not desired else len(set(desired) & bought) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeMatch(r_type, query_match, category_match, title_score)


def attribute_matches(product: Product, goal_attributes: Iterable[str]) -> int:
    """How many goal attributes the product has (fuzzy against its attributes, else in its text)."""
    text_fields = (product.title.lower(), " ".join(product.bullet_points).lower(), product.description.lower())
    matched = 0
    for wanted in goal_attributes:
        fuzzy = any(fuzzy_match(have, wanted) for have in product.attributes)
        if fuzzy or any(wanted in text for text in text_fields):
            matched += 1
    return matched


def normalize_color(option: str) -> str:
    """The first colour of COLOR_WORDS found in the option as a substring ("navy-blue" → "blue"), else the option.

    Case-sensitive like the original; option values are lowercased by the loader, goal options come as written.
    """
    for color in COLOR_WORDS:
        if color in option:
            return color
    return option


def option_matches(chosen: Iterable[str], goal_options: Iterable[str]) -> int:
    """How many goal options the chosen options satisfy (each goal option at most once)."""
    have = [normalize_color(o) for o in chosen]
    return sum(
        any(fuzzy_match(h, normalize_color(wanted)) for h in have)
        for wanted in goal_options
    )


@dataclass(frozen=True)
class PurchaseReward:
    """The reward of one purchase and every component it is made of (reported in the step info)."""

    reward: float
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float
    n_attr_matches: int
    n_attrs: int
    n_option_matches: int
    n_options: int
    r_price: bool
    price: float
    price_upper: float

    def as_info(self) -> dict[str, Any]:
        return asdict(self)


def purchase_reward(
    product: Product, goal: Goal, chosen_options: Iterable[str], lexicon: Collection[str] | None = None
) -> PurchaseReward:
    kind = type_reward(product, goal, lexicon)
    n_attr = attribute_matches(product, goal.attributes)
    n_opt = option_matches(list(chosen_options), goal.options)
    r_price = product.price <= goal.price_upper
    total = (n_attr + n_opt + int(r_price)) / (len(goal.attributes) + len(goal.options) + 1)
    return PurchaseReward(
        reward=total * kind.r_type,
        r_type=kind.r_type,
        query_match=kind.query_match,
        category_match=kind.category_match,
        title_score=kind.title_score,
        n_attr_matches=n_attr,
        n_attrs=len(goal.attributes),
        n_option_matches=n_opt,
        n_options=len(goal.options),
        r_price=r_price,
        price=product.price,
        price_upper=goal.price_upper,
    )
