"""The WebShop env: search → results → item (options, sub pages) → `buy now`, as the original's text mode.

Actions are `search[<query>]` and `click[<button | asin | option>]`, with the original text env's semantics:

- `search[...]` works from every page (the original's `step` does not check for a search bar); `click[...]` only
  for what the page offers (`click[search]` never). Admissible actions: None on the search page (free-text query;
  the agent loop then passes any action through and this env validates it); on every other page the page's
  `click[...]` actions in the original's `get_available_actions` order (buttons, product links, then options).
- The chosen options belong to the open item and are cleared whenever the results page is shown (search,
  `Next >`, `< Prev` on results or from an item) or the search page is; a sub page and its `< Prev` keep them.
- `Next >` is always offered on results pages; past the last page it shows an empty page.
- An action the page does not offer is a no-op that costs a step: the same page comes back unchanged,
  `info["invalid_action"]` is True and `info["executable"]` False. With `invalid_action_feedback=True` the page is
  prefixed with `Invalid action: …` (agentforge's hint; the original adds nothing).

Only `click[buy now]` pays: the reward of `reward.py`, `info["task_score"] = 10·R`, `won` iff R == 1.
`split_scheme` picks the real-data goal ranges (`data.py`): "original" or "verl-agent".

The anchor (GiGPO's state key) is the page text plus the options chosen on the current item, which the simple
text mode does not show but which decide the reward.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from agentforge.envs.base import ENVS, EXECUTABLE, echo
from agentforge.envs.webshop.data import SPLIT_SCHEMES, Catalog, Goal, Product, load_catalog
from agentforge.envs.webshop.pages import (
    BACK_TO_SEARCH,
    BUY_NOW,
    NEXT_PAGE,
    PREV_PAGE,
    SUB_PAGES,
    Page,
    done_page,
    item_page,
    results_page,
    search_page,
    sub_page,
)
from agentforge.envs.webshop.reward import PurchaseReward, purchase_reward
from agentforge.errors import ConfigError
from agentforge.tasks import SPLIT_SEED_BASE
from agentforge.types import Observation, StepResult, Task

_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


def parse_action(action: str) -> tuple[str, str] | None:
    """`search[red shoes]` → ("search", "red shoes"); arguments lowercased with whitespace collapsed."""
    match = _ACTION.match(action) if isinstance(action, str) else None
    if match is None:
        return None
    # casefold the kind: `ſearch` matches the pattern (IGNORECASE) but lowers to itself, and was read as a click
    return match.group(1).casefold(), " ".join(match.group(2).lower().split())


def goal_index(task: Task, split_size: int) -> int:
    """A task's goal within its split: seeds count from the split's base (train 0, eval 1e6, test 2e6)."""
    if task.split not in SPLIT_SEED_BASE:
        raise ConfigError(f"unknown split {task.split!r} for webshop; valid splits: {', '.join(SPLIT_SEED_BASE)}")
    return (task.seed - SPLIT_SEED_BASE[task.split]) % split_size


def goal_key(goal: Goal) -> str:
    """A goal as a task key holds it (JSON, so no field can run into the next)."""
    return json.dumps([" ".join(goal.instruction_text.casefold().split()), sorted(goal.attributes),
                       sorted(goal.options), goal.price_upper], ensure_ascii=False)


@ENVS.register("webshop")
class WebShopEnv:
    """Buy the product the instruction asks for. Deterministic given the task and the actions."""

    # the SFT warm start's expert (`envs.base.expert_for`): a path, so this module does not import it
    expert: ClassVar[str] = "agentforge.envs.webshop.expert:expert_actions"
    drawing: ClassVar[str] = "agentforge.viewer.webshop:DRAWING"  # `agentforge view` (viewer/drawings.py)

    option_help: ClassVar[dict[str, str]] = {
        'data_dir': 'the catalog folder (null: the generated one shipped; real WebShop files when given)',
        'max_steps': 'env steps before the episode ends unpaid',
        'num_products': 'use only the first N products of the file (null: all)',
        'invalid_action_feedback': "true: prefix the page with 'Invalid action: ...' (the original adds nothing)",
        'split_scheme': 'real data goal ranges: original (test 0-500, eval 500-1500, train 1500+) | verl-agent',
    }

    def __init__(self, data_dir: str | None = None, max_steps: int = 15, num_products: int | None = None,
                 invalid_action_feedback: bool = False, split_scheme: str = "original") -> None:
        if max_steps < 1:
            raise ConfigError(f"webshop max_steps must be >= 1, got {max_steps}")
        if split_scheme not in SPLIT_SCHEMES:
            raise ConfigError(f"webshop split_scheme must be one of {', '.join(SPLIT_SCHEMES)}, got {split_scheme!r}")
        self.max_steps = max_steps
        self.invalid_action_feedback = invalid_action_feedback
        self.split_scheme = split_scheme
        self.catalog: Catalog = load_catalog(data_dir, num_products)
        self._goal: Goal | None = None
        self.steps_taken = 0
        self.done = False
        self._page: Page | None = None
        self._results: list[Product] = []
        self._results_page = 1
        self._asin: str | None = None
        self._chosen: dict[str, str] = {}
        self._last_reward: PurchaseReward | None = None

    # -- episode -------------------------------------------------------------------------------------------------
    def reset(self, task: Task) -> Observation:
        return self.reset_to_goal(self._goal_for(task))

    def task_key(self, task: Task) -> str:
        """The task's content (agentforge/envs/task_keys.py): the instruction as shown (case and whitespace
        normalised) and what the reward checks against it: attributes, options and price limit. Not the target
        asin: two goals written alike for two products read the same to the agent (the bundled catalog has one such
        pair), and that is what a held-out set must keep out of training."""
        return "webshop:" + goal_key(self._goal_for(task))

    def _goal_for(self, task: Task) -> Goal:
        goals = self.catalog.split(task.split, self.split_scheme)
        if not goals:
            raise ConfigError(f"the WebShop catalog in {self.catalog.source} has no {task.split} goals")
        return goals[goal_index(task, len(goals))]

    def reset_to_goal(self, goal: Goal) -> Observation:
        """Start an episode on a given goal (tests, hand-made tasks)."""
        self._goal = goal
        self.steps_taken = 0
        self.done = False
        self._results, self._results_page, self._asin, self._chosen = [], 1, None, {}
        self._last_reward = None
        self._page = search_page(goal.instruction_text)
        return self._observation()

    def step(self, action: str) -> StepResult:
        if self._goal is None:
            raise RuntimeError("the WebShop env has no episode; call reset(task) first")
        if self.done:
            raise RuntimeError("this WebShop episode is over (done=True); call reset() before stepping again")
        self.steps_taken += 1
        parsed = parse_action(action)
        error = self._act(parsed) if parsed is not None else (
            f"{echo(repr(action))} is not an action; write search[<query>] or click[<button>]")
        info: dict[str, Any] = {"steps": self.steps_taken, "page": self.page.name, "invalid_action": bool(error),
                                EXECUTABLE: not error}
        reward, won = 0.0, False
        if self._last_reward is not None:
            reward, won = self._last_reward.reward, self._last_reward.reward == 1.0
            info.update(task_score=10.0 * reward, reward_components=self._last_reward.as_info(),
                        purchased_asin=self._asin, chosen_options=dict(self._chosen),
                        goal_asin=self.goal.asin)
            self.done = True
        elif self.steps_taken >= self.max_steps:
            info.update(task_score=0.0, truncated=True)
            self.done = True
        if error:
            info["error"] = error
        return StepResult(self._observation(error), reward, self.done, won, info)

    def close(self) -> None:
        self._goal = None

    # -- accessors -----------------------------------------------------------------------------------------------
    @property
    def goal(self) -> Goal:
        if self._goal is None:
            raise RuntimeError("the WebShop env has no episode; call reset(task) first")
        return self._goal

    @property
    def page(self) -> Page:
        if self._page is None:
            raise RuntimeError("the WebShop env has no episode; call reset(task) first")
        return self._page

    @property
    def chosen_options(self) -> dict[str, str]:
        """The options selected on the current item (name → value)."""
        return dict(self._chosen)

    def admissible_actions(self) -> list[str] | None:
        """None on the search page (free-text query), else the page's `click[...]` actions."""
        if self.page.has_search_bar:
            return None
        return [f"click[{c}]" for c in self.page.clickables]

    # -- transitions ---------------------------------------------------------------------------------------------
    def _act(self, parsed: tuple[str, str]) -> str:
        """Apply an action; returns an error message when the page does not offer it (nothing changes then)."""
        kind, arg = parsed
        if kind == "search":
            if not arg:
                return "empty search; write search[<keywords>]"
            self._results = self.catalog.search_engine().search(arg)
            self._results_page = 1
            self._show_results()
            return ""
        if arg not in self.page.clickables:
            offered = ", ".join(self.page.clickables) or "nothing (use search[<query>])"
            return f"click[{echo(arg)}] is not on this page; clickable: {offered}"
        self._click(arg)
        return ""

    def _click(self, target: str) -> None:
        name = self.page.name
        if target == BACK_TO_SEARCH.lower():
            self._asin, self._chosen = None, {}
            self._page = search_page(self.goal.instruction_text)
        elif name == "results":
            if target == NEXT_PAGE.lower():
                self._results_page += 1  # unbounded, as the original: past the end the page is empty
            elif target == PREV_PAGE.lower():
                self._results_page -= 1  # offered from page 2 on only
            else:
                self._asin = next(p.asin for p in self._results if p.asin.lower() == target)
                self._page = item_page(self.goal.instruction_text, self.product)
                return
            self._show_results()
        elif name == "item":
            if target == PREV_PAGE.lower():
                self._show_results()
            elif target == BUY_NOW.lower():
                self._last_reward = purchase_reward(self.product, self.goal, self._chosen.values(), self.catalog.nouns)
                self._page = done_page(self.goal.instruction_text, self._last_reward.reward)
            elif target in (s.lower() for s in SUB_PAGES):
                self._page = sub_page(self.goal.instruction_text, self.product, target)
            else:
                # a value offered by two groups is bound to the last one (the original's text-to-clickable dict)
                option_name = [n for n, values in self.product.options.items() if target in values][-1]
                self._chosen[option_name] = target
        elif target == PREV_PAGE.lower():  # a sub page goes back to its item, options kept
            self._page = item_page(self.goal.instruction_text, self.product)

    def _show_results(self) -> None:
        """Show the current results page; like the original's `search_results`, it forgets the item and options."""
        self._asin, self._chosen = None, {}
        self._page = results_page(self.goal.instruction_text, self._results, self._results_page)

    @property
    def product(self) -> Product:
        if self._asin is None:
            raise RuntimeError("no product is open")
        return self.catalog.by_asin[self._asin]

    def _observation(self, error: str = "") -> Observation:
        page = self.page
        anchor = page.text
        chosen = self._chosen
        if chosen and page.name in ("item", "description", "features", "reviews"):
            anchor += " [SEP] chosen: " + ", ".join(f"{k}: {v}" for k, v in sorted(chosen.items()))
        text = f"Invalid action: {error} [SEP] {page.text}" if error and self.invalid_action_feedback else page.text
        return Observation(text=text, anchor=anchor, admissible=self.admissible_actions() if not self.done else [])
