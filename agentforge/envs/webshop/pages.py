"""WebShop's pages in the original's simple text mode: the visible strings of each page joined by ` [SEP] `.

Every page but the search page starts with the instruction and `Back to Search`; the item page lists option groups
(name, then values), the title, `Price: …`, `Rating: N.A.` and the buttons. Clickables are what the original's
`get_available_actions` returns, in its order: the page's buttons and product links (lowercased) in page order,
then the option values as written. The original never loads reviews or ratings (that code is commented out), so
every item shows `Rating: N.A.` and an empty Reviews page; so do these pages.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentforge.envs.webshop.data import Product

SEP = " [SEP] "
BACK_TO_SEARCH = "Back to Search"
PREV_PAGE = "< Prev"
NEXT_PAGE = "Next >"
BUY_NOW = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")
PRODUCTS_PER_PAGE = 10
RATING = "N.A."  # the original's `Rating` of every product (its review loading is commented out)


@dataclass(frozen=True)
class Page:
    """A rendered page: its text, what can be clicked on it (lowercase) and whether it has the search bar."""

    name: str
    text: str
    clickables: tuple[str, ...] = ()
    has_search_bar: bool = False


def _join(parts: list[str]) -> str:
    return SEP.join(p.strip() for p in parts if p is not None and p.strip())


def _header(instruction: str) -> list[str]:
    return ["Instruction:", instruction, BACK_TO_SEARCH]


def search_page(instruction: str) -> Page:
    return Page("search", _join(["WebShop", "Instruction:", instruction, "Search"]), (), has_search_bar=True)


def results_page(instruction: str, results: list[Product], page: int) -> Page:
    """Page `page` (1-based) of the search results, ten products each: asin, title, price tag.

    As the original's template: `< Prev` from page 2 on, `Next >` always (past the last page it shows no products).
    """
    total = len(results)
    shown = results[(page - 1) * PRODUCTS_PER_PAGE : page * PRODUCTS_PER_PAGE]
    parts = [*_header(instruction), f"Page {page} (Total results: {total})"]
    clickables = [BACK_TO_SEARCH.lower()]
    if page > 1:
        parts.append(PREV_PAGE)
        clickables.append(PREV_PAGE.lower())
    parts.append(NEXT_PAGE)
    clickables.append(NEXT_PAGE.lower())
    for product in shown:
        parts += [product.asin, product.title, product.price_tag]
        clickables.append(product.asin.lower())
    return Page("results", _join(parts), tuple(clickables))


def item_page(instruction: str, product: Product) -> Page:
    parts = [*_header(instruction), PREV_PAGE]
    for name, values in product.options.items():
        parts.append(name)
        parts += list(values)
    parts += [product.title, f"Price: {product.price_tag}", f"Rating: {RATING}", *SUB_PAGES, BUY_NOW]
    clickables = [BACK_TO_SEARCH.lower(), PREV_PAGE.lower(), *(s.lower() for s in SUB_PAGES), BUY_NOW.lower()]
    for values in product.options.values():
        clickables += [v for v in values if v not in clickables]
    return Page("item", _join(parts), tuple(clickables))


def sub_page(instruction: str, product: Product, which: str) -> Page:
    """The item's Description, Features (bullet points) or Reviews page (empty: the original shows no reviews)."""
    parts = [*_header(instruction), PREV_PAGE]
    if which == "description":
        parts.append(product.description)
    elif which == "features":
        parts += list(product.bullet_points)
    elif which != "reviews":
        raise ValueError(f"unknown item sub page {which!r}; expected one of {', '.join(s.lower() for s in SUB_PAGES)}")
    return Page(which, _join(parts), (BACK_TO_SEARCH.lower(), PREV_PAGE.lower()))


def done_page(instruction: str, reward: float) -> Page:
    return Page("done", _join(["Thank you for shopping with us!", "Instruction:", instruction,
                               "Your score (min 0.0, max 1.0)", f"{reward:.4g}"]))
