"""WebShop env: the original's pages, actions and reward over the bundled catalog, and the loader on real formats."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from agentforge.agent.prompts import prompt_for
from agentforge.envs.base import make_env
from agentforge.envs.webshop import WebShopEnv, parse_action
from agentforge.envs.webshop.data import BUNDLED_DATA_DIR, Goal, Product, load_catalog, parse_pricing, price_tag
from agentforge.envs.webshop.expert import expert_actions, option_clicks, plan
from agentforge.envs.webshop.reward import (
    COLOR_WORDS,
    attribute_matches,
    fuzzy_match,
    fuzzy_score,
    normalize_color,
    option_matches,
    purchase_reward,
    title_nouns,
    type_reward,
)
from agentforge.errors import ConfigError
from agentforge.types import Task

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def task(seed: int, split: str = "train") -> Task:
    base = {"train": 0, "eval": 1_000_000, "test": 2_000_000}[split]
    return Task(env="webshop", seed=base + seed, split=split)


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    return WebShopEnv()


def goal_with_option(env: WebShopEnv) -> tuple[Task, Goal, Product]:
    """A train task whose goal asks for a colour option and whose product offers another colour."""
    for seed in range(200):
        env.reset(task(seed))
        goal, product = env.goal, env.catalog.by_asin[env.goal.asin]
        colors = product.options.get("color", ())
        if len(goal.options) >= 1 and goal.options[0] in colors and len(colors) >= 2:
            return task(seed), goal, product
    raise AssertionError("no goal with a colour option in the first 200 train tasks")


# -- data -----------------------------------------------------------------------------------------------------------
def test_bundled_catalog_sizes_and_disjoint_splits(env: WebShopEnv) -> None:
    catalog = env.catalog
    assert len(catalog.products) == 1000 and len(catalog.goals) == 1500
    sizes = {s: len(catalog.split(s)) for s in ("test", "eval", "train")}
    assert sizes == {"test": 500, "eval": 200, "train": 800}
    ids = {s: {id(g) for g in catalog.split(s)} for s in sizes}
    assert not (ids["test"] & ids["eval"]) and not (ids["test"] & ids["train"]) and not (ids["eval"] & ids["train"])
    assert catalog.split("test") == catalog.goals[:500]  # test = the first 500 goals, as the original
    assert all(g.price_upper > catalog.by_asin[g.asin].price for g in catalog.goals)
    with pytest.raises(ConfigError, match="valid splits"):
        catalog.split("nope")


def test_catalog_is_loaded_once_per_process() -> None:
    assert load_catalog() is load_catalog(None) is load_catalog(BUNDLED_DATA_DIR)


def test_bundled_data_matches_its_generator() -> None:
    spec = importlib.util.spec_from_file_location("ws_gen", REPO / "envs" / "webshop" / "generate_catalog.py")
    gen = importlib.util.module_from_spec(spec)
    sys.modules["ws_gen"] = gen  # dataclasses look their module up while the file runs
    try:
        spec.loader.exec_module(gen)
    finally:
        del sys.modules["ws_gen"]
    products, attributes, instructions, nouns = gen.generate()
    assert json.loads((BUNDLED_DATA_DIR / "items_shuffle_1000.json").read_text()) == products
    assert json.loads((BUNDLED_DATA_DIR / "items_ins_v2_1000.json").read_text()) == attributes
    assert json.loads((BUNDLED_DATA_DIR / "items_human_ins.json").read_text()) == instructions
    assert json.loads((BUNDLED_DATA_DIR / "noun_lexicon.json").read_text()) == nouns


def test_seeds_map_to_goals_of_their_split(env: WebShopEnv) -> None:
    catalog = env.catalog
    env.reset(task(0, "test"))
    assert env.goal is catalog.split("test")[0]
    env.reset(task(3, "eval"))
    assert env.goal is catalog.split("eval")[3]
    env.reset(task(800 + 5))  # wraps around the 800 train goals
    assert env.goal is catalog.split("train")[5]
    with pytest.raises(ConfigError, match="valid splits"):
        env.reset(Task("webshop", 0, "nope"))


# -- pages ----------------------------------------------------------------------------------------------------------
def test_search_page_and_results_page_text(env: WebShopEnv) -> None:
    obs = env.reset(task(0))
    goal = env.goal.instruction_text
    assert obs.text == f"WebShop [SEP] Instruction: [SEP] {goal} [SEP] Search"
    assert obs.admissible is None and obs.anchor == obs.text
    result = env.step("search[shampoo]")
    assert not result.done and result.reward == 0.0
    text = result.observation.text
    assert text.startswith(f"Instruction: [SEP] {goal} [SEP] Back to Search [SEP] Page 1 (Total results: ")
    parts = text.split(" [SEP] ")
    assert parts[4] == "Next >"
    asin, title, price = parts[5:8]
    product = env.catalog.by_asin[asin]
    assert title == product.title and price == product.price_tag and price.startswith("$")
    admissible = result.observation.admissible
    assert admissible[:2] == ["click[back to search]", "click[next >]"] and f"click[{asin.lower()}]" in admissible
    assert len(admissible) == 2 + 10


def test_item_page_lists_options_title_price_and_buttons(env: WebShopEnv) -> None:
    t, goal, product = goal_with_option(env)
    env.reset(t)
    actions = plan(env, goal)
    for action in actions[:-1 - len(goal.options)]:  # search, (next), open the product
        result = env.step(action)
    expected = ["Instruction:", goal.instruction_text, "Back to Search", "< Prev"]
    for name, values in product.options.items():
        expected += [name, *values]
    expected += [product.title, f"Price: {product.price_tag}", "Rating: N.A.", "Description",
                 "Features", "Reviews", "Buy Now"]
    assert result.observation.text == " [SEP] ".join(expected)
    admissible = result.observation.admissible
    # the original's order: buttons as on the page, then the option values
    buttons = ["back to search", "< prev", "description", "features", "reviews", "buy now"]
    values = list(dict.fromkeys(v for group in product.options.values() for v in group))
    assert admissible == [f"click[{c}]" for c in buttons + values]
    features = env.step("click[features]").observation.text
    assert features.endswith(" [SEP] ".join(product.bullet_points))
    env.step("click[< prev]")
    reviews = env.step("click[reviews]").observation.text  # the original shows no reviews
    assert reviews == f"Instruction: [SEP] {goal.instruction_text} [SEP] Back to Search [SEP] < Prev"
    assert env.step("click[< prev]").observation.text == result.observation.text


def test_paging_through_results(env: WebShopEnv) -> None:
    env.reset(task(1))
    total = len(env.catalog.search_engine().search("free"))
    assert total == 50  # the search engine returns at most 50 hits
    first = env.step("search[free]").observation
    assert "Page 1 (Total results: 50)" in first.text and "< Prev" not in first.text
    pages = [first]
    for _ in range(4):
        pages.append(env.step("click[next >]").observation)
    assert "Page 5 (Total results: 50) [SEP] < Prev [SEP] Next > [SEP] B" in pages[-1].text  # Next > always
    buttons = {"click[back to search]", "click[next >]", "click[< prev]"}
    shown = [a for page in pages for a in page.admissible if a not in buttons]
    assert len(shown) == len(set(shown)) == 50
    empty = env.step("click[next >]").observation  # past the last page: an empty results page, as the original
    assert empty.text.endswith("Page 6 (Total results: 50) [SEP] < Prev [SEP] Next >")
    assert empty.admissible == ["click[back to search]", "click[< prev]", "click[next >]"]
    env.step("click[< prev]")
    back = env.step("click[< prev]").observation
    assert back.text == pages[3].text
    env.reset(task(1))
    first = env.step("search[free]").observation
    bad = env.step("click[< prev]")  # not offered on page 1
    assert bad.info["invalid_action"] and bad.observation == first


def test_options_are_cleared_whenever_the_results_page_is_shown(env: WebShopEnv) -> None:
    t, goal, product = goal_with_option(env)
    env.reset(t)
    actions = plan(env, goal)
    open_item = actions.index(f"click[{goal.asin.lower()}]")
    for action in actions[: open_item + 1]:
        item = env.step(action).observation
    other = next(v for v in product.options["color"] if v != goal.options[0])
    chosen = env.step(f"click[{other}]").observation
    assert env.chosen_options == {"color": other}
    assert chosen.text == item.text and chosen.anchor != item.anchor and other in chosen.anchor  # state changed
    env.step("click[description]")
    env.step("click[< prev]")  # a sub page and its < Prev keep the options
    assert env.chosen_options == {"color": other}
    env.step(f"click[{goal.options[0]}]")  # clicking another value of the group replaces it
    assert env.chosen_options == {"color": goal.options[0]}
    env.step("click[< prev]")  # back to the results: the original's search_results clears the options
    assert env.chosen_options == {}
    env.step(f"click[{goal.asin.lower()}]")
    assert env.chosen_options == {}
    env.step(f"click[{other}]")
    env.step(f"search[{product.title}]")  # a search from the item page: accepted, options cleared
    assert env.page.name == "results" and env.chosen_options == {}


# -- reward ---------------------------------------------------------------------------------------------------------
def test_scripted_episode_earns_reward_one(env: WebShopEnv) -> None:
    t, goal, _ = goal_with_option(env)
    env.reset(t)
    actions = plan(env, goal)
    for action in actions:
        result = env.step(action)
    assert result.done and result.won and result.reward == 1.0
    info = result.info
    assert info["task_score"] == 10.0 and info["purchased_asin"] == goal.asin == info["goal_asin"]
    parts = info["reward_components"]
    assert parts["r_type"] == 1.0 and parts["query_match"] and parts["title_score"] == 1.0 and parts["r_price"]
    assert parts["n_attr_matches"] == parts["n_attrs"] == len(goal.attributes)
    assert parts["n_option_matches"] == parts["n_options"] == len(goal.options)
    assert "Thank you for shopping with us!" in result.observation.text
    with pytest.raises(RuntimeError, match="over"):
        env.step("click[buy now]")


def test_wrong_option_earns_partial_reward(env: WebShopEnv) -> None:
    t, goal, product = goal_with_option(env)
    env.reset(t)
    wrong = next(v for v in product.options["color"] if v != goal.options[0] and normalize_color(v) !=
                 normalize_color(goal.options[0]))
    actions = [a if a != f"click[{goal.options[0]}]" else f"click[{wrong}]" for a in plan(env, goal)]
    for action in actions:
        result = env.step(action)
    n_attrs, n_opts = len(goal.attributes), len(goal.options)
    assert result.done and not result.won
    assert result.reward == pytest.approx((n_attrs + n_opts - 1 + 1) / (n_attrs + n_opts + 1))
    assert result.info["reward_components"]["n_option_matches"] == n_opts - 1
    assert result.info["task_score"] == pytest.approx(10 * result.reward)


def make_product(**kw) -> Product:
    base = dict(asin="B000000001", title="Acme Citrus Deodorant Stick for Women", category="beauty",
                query="deodorant", product_category="Beauty › Personal Care › Deodorants",
                description="A gentle deodorant that is paraben free.", bullet_points=("Long Lasting: all day",),
                price_tag="$9.00", price=9.0, options={"color": ("navy blue", "black")},
                attributes=("aluminum free", "sensitive skin"))
    base.update(kw)
    return Product(**base)


def make_goal(**kw) -> Goal:
    base = dict(asin="B000000001", instruction_text="i need a deodorant", attributes=("aluminum free",),
                options=(), price_upper=20.0, query="deodorant", name="Acme Citrus Deodorant Stick for Women",
                product_category="Beauty › Personal Care › Deodorants", category="beauty")
    base.update(kw)
    return Goal(**base)


def test_attribute_matching_fuzzy_then_text() -> None:
    product = make_product()
    assert attribute_matches(product, ["aluminum free"]) == 1  # exact attribute
    assert attribute_matches(product, ["aluminium free"]) == 1  # fuzzy: token_set_ratio 93 > 85
    assert attribute_matches(product, ["paraben free"]) == 1  # substring of the description
    assert attribute_matches(product, ["long lasting"]) == 1  # substring of the (lowercased) bullet points
    assert attribute_matches(product, ["gluten free", "vegan"]) == 0


def test_option_matching_normalises_colours_and_counts_each_goal_option_once() -> None:
    assert normalize_color("navy blue") == "blue" and normalize_color("light grey") == "grey"
    assert option_matches(["dark blue"], ["navy blue"]) == 1
    assert option_matches(["black"], ["navy blue"]) == 0
    assert option_matches(["black", "large"], ["black", "large", "x-small"]) == 2
    assert option_matches(["black"], ["black", "black"]) == 2  # two goal options, one chosen value each time


def test_reward_formula_by_hand() -> None:
    product = make_product()
    goal = make_goal(attributes=("aluminum free", "gluten free"), options=("navy blue", "large"), price_upper=8.0)
    result = purchase_reward(product, goal, ["navy blue"], lexicon=None)
    # 1 attribute + 1 option + price over the limit (9 > 8) → 2 / (2 + 2 + 1)
    assert (result.n_attr_matches, result.n_option_matches, result.r_price) == (1, 1, False)
    assert result.reward == pytest.approx(2 / 5)
    cheap = purchase_reward(replace(product, price=7.5), goal, ["navy blue", "large"], lexicon=None)
    assert cheap.reward == pytest.approx(4 / 5)


def test_type_reward_rules() -> None:
    lexicon = {"acme", "deodorant", "stick", "women", "shampoo", "citrus", "bottle"}
    goal = make_goal()
    assert title_nouns(goal.name, lexicon) == ["acme", "citrus", "deodorant", "stick", "women"]
    assert title_nouns("Long Lasting Deodorant Stick, 2.6 oz", None) == ["lasting", "deodorant", "stick"]
    same = type_reward(make_product(), goal, lexicon)
    assert (same.r_type, same.query_match, same.category_match, same.title_score) == (1.0, True, True, 1.0)
    # other query, one shared category level, 2 of 5 nouns → title score 0.4 > 0.2: still 1
    other = make_product(query="shampoo", product_category="Beauty › Hair Care", title="Acme Citrus Shampoo")
    assert type_reward(other, goal, lexicon).r_type == 1.0
    # 1 of 5 nouns (0.2, not > 0.2), no query or category match → 0.5
    weak = make_product(query="shampoo", product_category="Beauty › Hair Care", title="Acme Shampoo Bottle")
    assert type_reward(weak, goal, lexicon).title_score == pytest.approx(0.2)
    assert type_reward(weak, goal, lexicon).r_type == 0.5
    # query matches but 0 < title score < 0.1 → 0.1; no shared noun → 0
    many = make_goal(name="Acme " + " ".join(f"noun{i}" for i in range(11)))
    lex = lexicon | {f"noun{i}" for i in range(11)}
    assert type_reward(make_product(), many, lex).r_type == 0.1
    assert type_reward(make_product(title="Shampoo Bottle"), goal, lexicon).r_type == 0.0
    assert purchase_reward(make_product(title="Shampoo Bottle"), goal, [], lexicon).reward == 0.0


# -- fidelity to the original's scoring (issue 15) ------------------------------------------------------------------
@pytest.mark.parametrize(("a", "b"), [("x-large", "large"), ("gluten free", "gluten-free"),
                                      ("long lasting", "Long Lasting"), ("7.5", "7")])
def test_fuzzy_score_processes_like_thefuzz(a: str, b: str) -> None:
    from rapidfuzz import fuzz

    # thefuzz.fuzz.token_set_ratio gives 100 for each pair (punctuation → space, lower case, token subset)
    assert fuzzy_score(a, b) == 100 and fuzzy_match(a, b)
    assert fuzz.token_set_ratio(a, b) <= 85  # rapidfuzz without processing (the old call) scored them no match


@pytest.mark.parametrize(("a", "b", "original"), [
    ("noise_cancelling", "cancelling", 77),  # `_` is a word character for thefuzz 0.19: one token, not two
    ("water_resistant shoes", "water resistant shoes", 71),
    ("Café au lait", "cafe au lait", 96),
])
def test_fuzzy_score_equals_thefuzz_019_as_the_original_pins_it(a: str, b: str, original: int) -> None:
    """Scores thefuzz 0.19.0 (pure Python: the original installs no python-Levenshtein) gives; over 40,000 random
    typo pairs agentforge's scores were all equal to it (rapidfuzz's processing differed on 742 match decisions)."""
    assert fuzzy_score(a, b) == original


def test_empty_category_levels_count_as_in_the_original() -> None:
    goal = make_goal()
    a = make_product(query="other", product_category="a › b › ", title=goal.name)
    g = make_goal(product_category="a › d › ")
    assert type_reward(a, g).category_match  # shares "a" and "" as the original's set intersection does


def test_fuzzy_score_rounds_to_an_integer_and_drops_latin1() -> None:
    a, b = "x" * 23 + "abcd", "x" * 23 + "efgh"  # raw ratio 85.19: thefuzz rounds to 85, which is not > 85
    assert fuzzy_score(a, b) == 85 and not fuzzy_match(a, b)
    assert fuzzy_score("café", "cafe") == 86  # thefuzz drops "é" (U+00E9): "caf" vs "cafe" = 85.7 → 86
    assert fuzzy_score("", "large") == 0


def test_reward_and_expert_use_the_original_fuzzy_matching() -> None:
    product = make_product(attributes=("gluten-free", "long lasting"))
    assert attribute_matches(product, ["gluten free", "Long Lasting"]) == 2
    assert option_matches(["x-large"], ["large"]) == 1 and option_matches(["7.5"], ["7"]) == 1
    assert option_matches(["small"], ["large"]) == 0
    choosy = make_product(options={"flavor": ("gluten free", "regular")})
    assert option_clicks(choosy, make_goal(options=("gluten-free",))) == ["gluten free"]


def test_colour_normalisation_is_the_originals() -> None:
    assert {"alabaster", "christmas", "heather", "skull", "stonewash", "wheat"} <= set(COLOR_WORDS)
    assert len(COLOR_WORDS) == len(set(COLOR_WORDS)) == 102
    assert [normalize_color(o) for o in ("navy-blue", "a-black", "b-red")] == ["blue", "black", "red"]
    assert option_matches(["navy-blue"], ["navy blue"]) == 1 and option_matches(["b-red"], ["red"]) == 1
    assert option_matches(["a-black"], ["b-red"]) == 0
    assert normalize_color("standard") == "tan"  # the original's plain substring test, kept for equal rewards
    assert normalize_color("x-large") == "x-large"


def test_items_show_no_rating_or_reviews_even_when_the_data_has_them(env: WebShopEnv) -> None:
    raw = json.loads((BUNDLED_DATA_DIR / "items_shuffle_1000.json").read_text())
    reviewed = {p["asin"] for p in raw if p.get("reviews") and p.get("average_rating")}
    for seed in range(200):
        env.reset(task(seed))
        if env.goal.asin in reviewed:
            break
    actions = plan(env, env.goal)
    for action in actions[: actions.index(f"click[{env.goal.asin.lower()}]") + 1]:
        item = env.step(action).observation
    assert "Rating: N.A." in item.text  # the original's loader leaves reviews and ratings out
    reviews = env.step("click[reviews]").observation.text
    assert reviews == f"Instruction: [SEP] {env.goal.instruction_text} [SEP] Back to Search [SEP] < Prev"


def test_prices_render_as_the_original() -> None:
    assert [price_tag(v) for v in ([12.99], [12.5], [100.0], [10.0, 20.0])] == [
        "$12.99", "$12.5", "$100.0", "$10.0 to $20.0"]
    assert price_tag(parse_pricing(None)) == "$100.0"


def _real_data_folder(folder: Path, n_goals: int, lexicon: bool = False) -> Path:
    products = [{"asin": f"B0000000{i:02d}", "name": f"Brand{i} Mug", "category": "home", "query": "mug",
                 "product_category": "Home › Kitchen", "full_description": "", "small_description": [],
                 "pricing": "$5.00", "customization_options": {}, "images": ["x"]} for i in range(10)]
    per = -(-n_goals // len(products))
    human = {p["asin"]: [{"instruction": f"mug {p['asin']} {k}", "instruction_attributes": ["mug"],
                          "instruction_options": []} for k in range(per)] for p in products}
    folder.mkdir()
    (folder / "items_shuffle.json").write_text(json.dumps(products))
    (folder / "items_ins_v2.json").write_text(json.dumps({}))
    (folder / "items_human_ins.json").write_text(json.dumps(human))
    if lexicon:
        (folder / "noun_lexicon.json").write_text(json.dumps(["mug"]))
    return folder


def test_real_data_uses_the_originals_goal_ranges(tmp_path: Path) -> None:
    catalog = load_catalog(_real_data_folder(tmp_path / "real", 1800))
    assert len(catalog.goals) == 1800 and not catalog.generated
    # the original's baseline_models/env.py: test [0, 500), eval [500, 1500), train [1500, end)
    assert catalog.split("test") == catalog.goals[:500]
    assert catalog.split("eval") == catalog.goals[500:1500]
    assert catalog.split("train") == catalog.goals[1500:]
    # verl-agent: train [500, end), validation on [0, 500)
    assert catalog.split("train", "verl-agent") == catalog.goals[500:]
    assert catalog.split("eval", "verl-agent") == catalog.split("test", "verl-agent") == catalog.goals[:500]
    env = WebShopEnv(data_dir=str(tmp_path / "real"))
    env.reset(task(3, "train"))
    assert env.goal is catalog.goals[1503]
    env = WebShopEnv(data_dir=str(tmp_path / "real"), split_scheme="verl-agent")
    env.reset(task(3, "train"))
    assert env.goal is catalog.goals[503]
    with pytest.raises(ConfigError, match="split_scheme"):
        WebShopEnv(split_scheme="nope")
    # a generated catalog (it ships noun_lexicon.json) keeps its own documented split
    generated = load_catalog(_real_data_folder(tmp_path / "generated", 1800, lexicon=True))
    assert generated.generated and [len(generated.split(s)) for s in ("test", "eval", "train")] == [500, 200, 1100]


# -- actions --------------------------------------------------------------------------------------------------------
def test_invalid_actions_return_the_same_page_unchanged(env: WebShopEnv) -> None:
    obs = env.reset(task(2))
    for action in ("click[buy now]", "hello", "search[]", "buy[x]", "click[search]"):
        result = env.step(action)
        assert result.info["invalid_action"] and result.info["error"] and not result.done and result.reward == 0
        assert result.observation == obs  # the original adds nothing to the page
    results = env.step("search[tea]")
    assert not results.info["invalid_action"] and results.observation.admissible is not None
    asin = results.observation.admissible[2]
    item = env.step(asin).observation
    assert env.step("click[next >]").observation == item  # not on the item page
    again = env.step("search[coffee]")  # the original's step searches from any page
    assert not again.info["invalid_action"] and again.observation.text.split(" [SEP] ")[3].startswith("Page 1")
    assert parse_action("  Click [ Buy  Now ] ") == ("click", "buy now")
    assert parse_action("search[red shoes") is None


def test_invalid_action_feedback_is_an_option() -> None:
    env = WebShopEnv(invalid_action_feedback=True)
    obs = env.reset(task(2))
    result = env.step("click[buy now]")
    assert result.info["invalid_action"] and result.observation.text.startswith("Invalid action: ")
    assert result.observation.text.endswith(obs.text) and result.observation.anchor == obs.anchor


def test_turn_limit_ends_the_episode_unpaid() -> None:
    env = WebShopEnv(max_steps=3)
    env.reset(task(0))
    results = [env.step(a) for a in ("search[tea]", "click[back to search]", "search[coffee]")]
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].reward == 0.0 and not results[-1].won and results[-1].info["truncated"]
    with pytest.raises(ConfigError, match="max_steps"):
        WebShopEnv(max_steps=0)


def test_same_task_same_episode_via_registry() -> None:
    a, b = make_env("webshop"), make_env("webshop", {"max_steps": 15})
    assert a.reset(task(7, "test")).text == b.reset(task(7, "test")).text
    for action in ("search[socks]", "click[next >]", "click[< prev]"):
        ra, rb = a.step(action), b.step(action)
        assert ra.observation == rb.observation


def test_expert_wins_train_and_test_tasks() -> None:
    wins = [expert_actions(task(s, split)) is not None for split in ("train", "test") for s in range(40)]
    assert all(wins)


def test_prompt_shows_the_search_action_on_the_search_page(env: WebShopEnv) -> None:
    template = prompt_for("webshop")
    user = template.messages(env.reset(task(0)), [], 1)[-1]["content"]
    assert "Admissible actions: search[<your query>]." in user
    results = env.step("search[tea]").observation
    assert "click[back to search], click[next >]" in template.messages(results, [], 2)[-1]["content"]


# -- the loader on the original's formats ---------------------------------------------------------------------------
def test_loader_reads_original_format_files(tmp_path: Path) -> None:
    products = [
        {"asin": f"B00000000{i}", "name": f"Brand{i} Cotton T-Shirt for Men", "category": "fashion",
         "query": "T-Shirt ", "product_category": "Clothing › Men › Shirts", "full_description": "soft cotton tee",
         "small_description": "machine wash", "pricing": "$10.00 - $20.00" if i == 0 else f"${15 + i}.50",
         "customization_options": {"Color": [{"value": "Navy/White", "image": None}, {"value": "Black"}],
                                   "Size": None},
         "images": ["x"]}
        for i in range(3)
    ] + [{"asin": "B000000000", "name": "duplicate asin is skipped"}, {"asin": "nan", "name": "skipped"}]
    attributes = {p["asin"]: {"attributes": ["machine wash"]} for p in products[:3]}
    human = {"B000000000": [{"asin": "B000000000", "instruction": f"i need a machine wash t-shirt {k}.",
                             "instruction_attributes": ["machine wash"], "instruction_options": ["navy | white"]}
                            for k in range(6)] + [{"instruction": "no attributes", "instruction_attributes": []}],
             "B000000001": [{"asin": "B000000001", "instruction": "a cotton t-shirt",
                             "instruction_attributes": ["cotton"], "instruction_options": []}]}
    (tmp_path / "items_shuffle.json").write_text(json.dumps(products))
    (tmp_path / "items_ins_v2.json").write_text(json.dumps(attributes))
    (tmp_path / "items_human_ins.json").write_text(json.dumps(human))
    catalog = load_catalog(tmp_path)
    assert [p.asin for p in catalog.products] == ["B000000000", "B000000001", "B000000002"]
    first = catalog.by_asin["B000000000"]
    assert first.price_tag == "$10.0 to $20.0" and 10.0 <= first.price <= 20.0  # the original's float rendering
    assert catalog.by_asin["B000000001"].price_tag == "$16.5"
    assert first.options == {"color": ("navy | white", "black")} and first.bullet_points == ("machine wash",)
    assert first.query == "t-shirt" and catalog.nouns is None and not catalog.generated
    # real data: the original's goal ranges (test = the first 500), so these 7 goals are all test goals
    assert len(catalog.goals) == 7 and [len(catalog.split(s)) for s in ("test", "eval", "train")] == [7, 0, 0]
    env = WebShopEnv(data_dir=str(tmp_path))
    for seed in range(4):
        env.reset(task(seed, "test"))
        actions = plan(env, env.goal)
        for action in actions:
            result = env.step(action)
        assert result.won, (env.goal, actions, result.info)
    assert parse_pricing(None) == [100.0] and parse_pricing("$1,299.99") == [1299.99]
    with pytest.raises(ConfigError, match="not a folder"):
        load_catalog(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="items_shuffle"):
        load_catalog(empty)
