"""Load a WebShop catalog (products, attributes, human instructions) from the original's file formats.

The same loader reads the bundled generated catalog (`data/`) and the real WebShop files when a user points
`env.data_dir` at them. What it does, in the original's terms:

- products (`items_shuffle_1000.json` or `items_shuffle.json`): Title = `name`, Description = `full_description`,
  BulletPoints = `small_description`, options = `customization_options` lowercased with `/` shown as ` | `, price
  tag `$a` or `$a to $b` from `pricing` with Python's float formatting like the original (`$12.99`, `$12.5`,
  `$100.0`); duplicate or malformed asins are skipped. Reviews and ratings are not read: the original's loader has
  that code commented out and shows `Rating: N.A.` everywhere.
- attributes (`items_ins_v2_1000.json` or `items_ins_v2.json`): `{asin: {"attributes": [...]}}`.
- goals (`items_human_ins.json`): one per human instruction with attributes; the price limit is drawn as the
  original does (two of the four next multiples of 10 above the product's price, the larger one) from a fixed-seed
  RNG, then the goals are shuffled with seed 233 like the original server.
- splits by goal index. Real data (`env.data_dir`): the original's ranges (`baseline_models/env.py`): test = goals
  [0, 500), eval = [500, 1500), train = [1500, end); with `split_scheme="verl-agent"` train = [500, end) as
  verl-agent's WebShop env (it has no dev split: eval = test = [0, 500)). A generated catalog (one with
  `noun_lexicon.json`, like the bundled one) keeps its own split:
  test = the first 500 goals, eval = the next 200, train = the rest (for small catalogs: a third, a seventh, the
  rest).

A product priced as a range gets one price inside it from an RNG seeded by its asin (the original draws it
unseeded), so rewards are reproducible.
"""

from __future__ import annotations

import random
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentforge.envs.data_errors import data_error, expect, read_json, record_errors
from agentforge.errors import ConfigError

if TYPE_CHECKING:
    from agentforge.envs.webshop.search import ProductSearch

BUNDLED_DATA_DIR = Path(__file__).resolve().parent / "data"
PRODUCT_FILES = ("items_shuffle_1000.json", "items_shuffle.json")
ATTRIBUTE_FILES = ("items_ins_v2_1000.json", "items_ins_v2.json")
HUMAN_GOALS_FILE = "items_human_ins.json"
NOUN_LEXICON_FILE = "noun_lexicon.json"

GOAL_SHUFFLE_SEED = 233  # the original server's `random.seed(233); random.shuffle(goals)`
PRICE_LIMIT_SEED = 233
PRICE_STEPS = [10.0 * i for i in range(1, 100)]
NO_PRICE_LIMIT = 1_000_000.0
TEST_GOALS, EVAL_GOALS = 500, 200  # the generated catalog's split
ORIGINAL_TEST_END, ORIGINAL_EVAL_END = 500, 1500  # the original's goal ranges for real data
SPLITS = ("train", "eval", "test")
SPLIT_SCHEMES = ("original", "verl-agent")
REGENERATE = "regenerate the bundled catalog with `python envs/webshop/generate_catalog.py`"


def fix_for(path: Path) -> str:
    """What to do about a broken catalog file: regenerate a bundled one, replace a user's one."""
    if path.resolve().parent == BUNDLED_DATA_DIR:
        return f"{REGENERATE} (or reinstall agentforge)"
    return ("fix it or download the WebShop data again (envs/webshop/README.md lists the files and their format), "
            "or set env.data_dir=null for the bundled catalog")


@dataclass(frozen=True)
class Product:
    """One product as the pages show it and the reward reads it."""

    asin: str
    title: str
    category: str
    query: str
    product_category: str
    description: str
    bullet_points: tuple[str, ...]
    price_tag: str
    price: float
    options: dict[str, tuple[str, ...]]
    attributes: tuple[str, ...]

    def search_text(self) -> str:
        """What the search index sees: title, description, bullet points and option values."""
        option_text = " ".join(f"{name} {' '.join(values)}" for name, values in self.options.items())
        return " ".join([self.title, self.description, *self.bullet_points, option_text])


@dataclass(frozen=True)
class Goal:
    """What to buy: the instruction, the attributes and options it asks for and the price limit."""

    asin: str
    instruction_text: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    price_upper: float
    query: str
    name: str
    product_category: str
    category: str


@dataclass
class Catalog:
    """Products by asin, goals in the original's shuffled order, split by goal index (see the module doc)."""

    products: list[Product]
    goals: list[Goal]
    nouns: frozenset[str] | None
    source: Path
    generated: bool = True  # a generated catalog (it ships noun_lexicon.json; real data does not): its own split
    by_asin: dict[str, Product] = field(init=False)
    _search: Any = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_asin = {p.asin: p for p in self.products}

    def split(self, name: str, scheme: str = "original") -> list[Goal]:
        if name not in SPLITS:
            raise ConfigError(f"unknown WebShop split {name!r}; valid splits: {', '.join(SPLITS)}")
        if scheme not in SPLIT_SCHEMES:
            raise ConfigError(f"unknown WebShop split_scheme {scheme!r}; valid: {', '.join(SPLIT_SCHEMES)}")
        n = len(self.goals)
        if self.generated:
            test = min(TEST_GOALS, n // 3)
            dev = min(EVAL_GOALS, n // 7)
            bounds = {"test": (0, test), "eval": (test, test + dev), "train": (test + dev, n)}
        elif scheme == "verl-agent":
            bounds = {"test": (0, ORIGINAL_TEST_END), "eval": (0, ORIGINAL_TEST_END), "train": (ORIGINAL_TEST_END, n)}
        else:
            bounds = {"test": (0, ORIGINAL_TEST_END), "eval": (ORIGINAL_TEST_END, ORIGINAL_EVAL_END),
                      "train": (ORIGINAL_EVAL_END, n)}
        lo, hi = bounds[name]
        return self.goals[lo:hi]

    def search_engine(self) -> ProductSearch:
        """The BM25 search over products: built on first use, then shared by every env of the process."""
        if self._search is None:
            with self._lock:
                if self._search is None:
                    from agentforge.envs.webshop.search import ProductSearch

                    self._search = ProductSearch(self.products)
        return self._search


def _find(folder: Path, names: tuple[str, ...], what: str) -> Path:
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise ConfigError(
        f"WebShop data folder {folder} has no {what} file (looked for {', '.join(names)}); point env.data_dir at a "
        "folder with the WebShop files, or leave it null for the bundled catalog"
    )


def _read_json(path: Path, kind: type) -> Any:
    """A catalog file's JSON, checked to be the list or object its format has."""
    return expect(read_json(path, fix_for(path)), kind, path, "the top level", fix_for(path))


def parse_pricing(pricing: Any) -> list[float]:
    """`"$12.99"` → [12.99]; `"$12.99 - $15.99"` → [12.99, 15.99]; missing → [100.0] (the original's default)."""
    if isinstance(pricing, int | float):
        return [float(pricing)]
    if not pricing or not isinstance(pricing, str):
        return [100.0]
    values = []
    for part in pricing.split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", part)
        if digits.count(".") <= 1 and digits.strip("."):
            values.append(float(digits))
    return values[:2] or [100.0]


def price_tag(values: list[float]) -> str:
    """As the original's loader: Python's float repr, so `$12.99`, `$12.5`, `$100.0`, `$10.0 to $20.0`."""
    return f"${values[0]}" if len(values) == 1 else f"${values[0]} to ${values[1]}"


def product_price(asin: str, values: list[float]) -> float:
    """The price the reward compares with the limit: fixed, or drawn inside the range by an asin-seeded RNG."""
    if len(values) == 1:
        return values[0]
    return round(random.Random(f"webshop-price-{asin}").uniform(values[0], values[1]), 2)


def _options(raw: Any) -> dict[str, tuple[str, ...]]:
    options: dict[str, tuple[str, ...]] = {}
    for name, contents in (raw or {}).items():
        if not contents:
            continue
        values = []
        for content in contents:
            value = content.get("value") if isinstance(content, dict) else content
            if value is not None:
                values.append(str(value).strip().replace("/", " | ").lower())
        options[str(name).lower()] = tuple(values)
    return options


def _product(raw: dict[str, Any], attributes: dict[str, Any]) -> Product:
    asin = raw["asin"]
    bullets = raw.get("small_description") or []
    values = parse_pricing(raw.get("pricing"))
    return Product(
        asin=asin,
        title=str(raw.get("name", "")),
        category=str(raw.get("category", "")),
        query=str(raw.get("query", "")).lower().strip(),
        product_category=str(raw.get("product_category", "")),
        description=str(raw.get("full_description") or ""),
        bullet_points=tuple(bullets) if isinstance(bullets, list) else (str(bullets),),
        price_tag=price_tag(values),
        price=product_price(asin, values),
        options=_options(raw.get("customization_options")),
        attributes=tuple(attributes.get(asin, {}).get("attributes") or ()),
    )


def _price_limit(rng: random.Random, price: float) -> tuple[float, str]:
    steps = [p for p in PRICE_STEPS if p > price][:4]
    if len(steps) < 2:
        return NO_PRICE_LIMIT, ""
    upper = max(rng.sample(steps, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def build_goals(products: list[Product], human: dict[str, list[dict[str, Any]]]) -> list[Goal]:
    """One goal per human instruction with attributes, in product order, then shuffled as the original."""
    rng = random.Random(PRICE_LIMIT_SEED)
    goals = []
    for product in products:
        for ins in human.get(product.asin, []):
            attributes = tuple(ins.get("instruction_attributes") or ())
            if not attributes:
                continue
            upper, price_text = _price_limit(rng, product.price)
            goals.append(
                Goal(
                    asin=product.asin,
                    instruction_text=str(ins["instruction"]).strip(".") + price_text,
                    attributes=attributes,
                    options=tuple(ins.get("instruction_options") or ()),
                    price_upper=upper,
                    query=product.query,
                    name=product.title,
                    product_category=product.product_category,
                    category=product.category,
                )
            )
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return goals


_CACHE: dict[tuple[str, int | None], Catalog] = {}
_CACHE_LOCK = threading.Lock()


def load_catalog(data_dir: str | Path | None = None, num_products: int | None = None) -> Catalog:
    """The catalog in `data_dir` (default: the bundled one), loaded once per process and shared."""
    folder = Path(data_dir).expanduser().resolve() if data_dir else BUNDLED_DATA_DIR
    if not folder.is_dir():
        raise ConfigError(f"WebShop data_dir {folder} is not a folder; set env.data_dir to the WebShop data folder "
                          "or null for the bundled catalog")
    if num_products is not None and num_products < 1:
        raise ConfigError(f"webshop num_products must be >= 1 or null (all), got {num_products}")
    key = (str(folder), num_products)
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = _load(folder, num_products)
        return _CACHE[key]


def _load(folder: Path, num_products: int | None) -> Catalog:
    products_path = _find(folder, PRODUCT_FILES, "products (items_shuffle)")
    attributes_path = _find(folder, ATTRIBUTE_FILES, "attributes (items_ins_v2)")
    human_path = _find(folder, (HUMAN_GOALS_FILE,), "human instructions")
    raw_products = _read_json(products_path, list)
    attributes = _read_json(attributes_path, dict)
    human = _read_json(human_path, dict)
    if num_products is not None:
        raw_products = raw_products[:num_products]
    products, seen = [], set()
    for index, raw in enumerate(raw_products):
        where = f"product {index}"
        asin = str(expect(raw, dict, products_path, where, fix_for(products_path)).get("asin", ""))
        if not asin or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        with record_errors(products_path, f"{where} (asin {asin})", fix_for(products_path)):
            expect(attributes.get(asin, {}), dict, attributes_path, f"the entry of {asin}", fix_for(attributes_path))
            products.append(_product(raw, attributes))
    if not products:
        raise data_error(products_path, "holds no product with an asin", fix_for(products_path))
    lexicon_path = folder / NOUN_LEXICON_FILE
    nouns = None
    if lexicon_path.is_file():
        with record_errors(lexicon_path, "a word", fix_for(lexicon_path)):
            nouns = frozenset(w.lower() for w in _read_json(lexicon_path, list))
    with record_errors(human_path, "an instruction", fix_for(human_path)):
        for asin, instructions in human.items():
            for ins in expect(instructions, list, human_path, f"the entry of {asin}", fix_for(human_path)):
                expect(ins, dict, human_path, f"an instruction of {asin}", fix_for(human_path))
        goals = build_goals(products, human)
    if not goals:
        raise data_error(human_path, "gives no goal for the loaded products (each needs an instruction with "
                         "instruction_attributes)", fix_for(human_path))
    return Catalog(products=products, goals=goals, nouns=nouns, source=folder, generated=nouns is not None)
