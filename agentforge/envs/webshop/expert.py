"""A scripted WebShop expert (for SFT warm starts and tests): search the instruction, page to the goal product,
choose the asked options, buy. It buys the goal's own product, which satisfies every attribute, option and the
price limit, so a found path earns reward 1.
"""

from __future__ import annotations

import re
from typing import Any

from agentforge.envs.webshop.data import Goal, Product
from agentforge.envs.webshop.env import WebShopEnv
from agentforge.envs.webshop.pages import NEXT_PAGE, PRODUCTS_PER_PAGE
from agentforge.envs.webshop.reward import FUZZY_THRESHOLD, fuzzy_score, normalize_color
from agentforge.types import Task

_PRICE_CLAUSE = re.compile(r",? and price lower than [\d.]+ dollars$")


def search_query(goal: Goal) -> str:
    """The instruction without its price clause: what a shopper would type."""
    return _PRICE_CLAUSE.sub("", goal.instruction_text).strip()


def option_clicks(product: Product, goal: Goal) -> list[str]:
    """The product's option value for each goal option (exact, else the best fuzzy match above the threshold)."""
    clicks = []
    values = [v for group in product.options.values() for v in group]
    for wanted in goal.options:
        exact = [v for v in values if v == wanted.lower()]
        if exact:
            clicks.append(exact[0])
            continue
        scored = [(fuzzy_score(normalize_color(v), normalize_color(wanted)), v) for v in values]
        best = max(scored, default=(0, ""))
        if best[0] > FUZZY_THRESHOLD:
            clicks.append(best[1])
    return list(dict.fromkeys(clicks))


def plan(env: WebShopEnv, goal: Goal) -> list[str] | None:
    """Actions that buy the goal product with its options, or None if a search does not find it."""
    product = env.catalog.by_asin[goal.asin]
    for query in (search_query(goal), product.title):
        results = [p.asin for p in env.catalog.search_engine().search(query.lower())]
        if goal.asin in results:
            position = results.index(goal.asin)
            pages = [f"click[{NEXT_PAGE.lower()}]"] * (position // PRODUCTS_PER_PAGE)
            options = [f"click[{value}]" for value in option_clicks(product, goal)]
            return [f"search[{query}]", *pages, f"click[{goal.asin.lower()}]", *options, "click[buy now]"]
    return None


def expert_actions(task: Task, env_options: dict[str, Any] | None = None) -> list[str] | None:
    """The expert's actions for `task`, checked by playing them; None if it cannot win within max_steps."""
    env = WebShopEnv(**(env_options or {}))
    try:
        env.reset(task)
        actions = plan(env, env.goal)
        if actions is None or len(actions) > env.max_steps:
            return None
        result = None
        for action in actions:
            result = env.step(action)
        return actions if result is not None and result.won else None
    finally:
        env.close()
