"""A WebShop observation drawn as the page it stands for: the instruction, buttons, search results as product
cards, an item's options and price, the final score; what the agent clicked next is outlined.

WebShop's text mode joins a page's visible strings with ` [SEP] ` (agentforge.envs.webshop.pages); this reads them
back by their fixed strings (buttons, `Page N (Total results: M)`, ASINs, `Price:`), so it needs no catalog.
"""

from __future__ import annotations

import re
from typing import Any

from markupsafe import Markup, escape

from agentforge.viewer.drawings import EnvDrawing

SEP = " [SEP] "
BUTTONS = ("Back to Search", "< Prev", "Next >", "Description", "Features", "Reviews", "Buy Now")
ASIN = re.compile(r"^B0[A-Z0-9]{8}$")
PAGER = re.compile(r"^Page \d+ \(Total results: \d+\)$")
CLICK = re.compile(r"^click\[(.+)\]$", re.IGNORECASE)
SEARCH = re.compile(r"^search\[(.*)\]$", re.IGNORECASE)


def clicked_target(action: str | None) -> str | None:
    """`click[Buy Now]` -> `buy now` (what to outline on the page the click was made on)."""
    match = CLICK.match((action or "").strip())
    return match.group(1).strip().lower() if match else None


def is_webshop_page(text: str) -> bool:
    return "Instruction:" in text and SEP.strip() in text


def page_html(text: str, action: str | None = None) -> Markup:
    """The observation as a small web page (escaped); `action` outlines the element it clicks."""
    parts = text.split(SEP)
    clicked = clicked_target(action)
    out = ['<div class="webshop-page">']
    if parts and parts[0].startswith("Invalid action:"):
        out.append(f'<div class="ws-error">{escape(parts.pop(0))}</div>')
    if parts and parts[0] == "WebShop":
        parts.pop(0)
        out.append('<div class="ws-brand">WebShop</div>')
    if parts and parts[0].startswith("Thank you for shopping"):
        out.append(f'<div class="ws-done">{escape(parts.pop(0))}</div>')
    price_at = next((i for i, p in enumerate(parts) if p.startswith("Price: ")), None)
    title_at = price_at - 1 if price_at else None
    options_from = parts.index("< Prev") + 1 if "< Prev" in parts and price_at else None
    i = 0
    while i < len(parts):
        part = parts[i]
        if part == "Instruction:" and i + 1 < len(parts):
            out.append(f'<div class="ws-instruction"><b>Instruction</b> {escape(parts[i + 1])}</div>')
            i += 2
            continue
        if part == "Search":
            query = SEARCH.match((action or "").strip())
            typed = f'<span class="ws-box ws-clicked">{escape(query.group(1))}</span>' if query else (
                '<span class="ws-box">search…</span>')
            out.append(f'<div class="ws-search">{typed}<span class="ws-button">Search</span></div>')
        elif part in BUTTONS:
            out.append(f'<span class="ws-button{_outline(clicked, part.lower())}">{escape(part)}</span>')
        elif PAGER.match(part):
            out.append(f'<div class="ws-pager">{escape(part)}</div>')
        elif ASIN.match(part):
            title = parts[i + 1] if i + 1 < len(parts) else ""
            price = parts[i + 2] if i + 2 < len(parts) and parts[i + 2].startswith("$") else ""
            out.append(f'<div class="ws-product{_outline(clicked, part.lower())}"><span class="ws-asin">'
                       f'{escape(part)}</span> <span class="ws-title">{escape(title)}</span> '
                       f'<span class="ws-price">{escape(price)}</span></div>')
            i += 3 if price else 2
            continue
        elif i == title_at:
            out.append(f'<div class="ws-item-title">{escape(part)}</div>')
        elif options_from is not None and title_at is not None and options_from <= i < title_at:
            out.append(f'<span class="ws-option{_outline(clicked, part.lower())}">{escape(part)}</span>')
        elif part.startswith(("Price: ", "Rating: ")):
            out.append(f'<div class="ws-meta">{escape(part)}</div>')
        else:
            out.append(f'<div class="ws-text">{escape(part)}</div>')
        i += 1
    out.append("</div>")
    return Markup("".join(out))


def _outline(clicked: str | None, name: str) -> str:
    return " ws-clicked" if clicked is not None and clicked == name else ""


def _turn(turn: dict[str, Any]) -> Markup | None:
    text = str(turn.get("observation", ""))
    return page_html(text, turn.get("action")) if is_webshop_page(text) else None


DRAWING = EnvDrawing(family="webshop", turn=_turn)
