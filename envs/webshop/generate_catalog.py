"""Generate agentforge's WebShop catalog in the original WebShop's file formats (deterministic, fixed seed).

Why generated: the original catalog comes from a file host this project cannot reach (see FACTS). This script
writes a small catalog with the same files and keys, so the same loader reads it and the real files:

  items_shuffle_1000.json   products: asin, name, category, query, product_category, full_description,
                            small_description (bullets), pricing ("$12.99" or "$12.99 - $15.99"),
                            customization_options {name: [{value, image}]}, images, average_rating, reviews
  items_ins_v2_1000.json    {asin: {"attributes": [...]}}: each product's attribute phrases
  items_human_ins.json      {asin: [{asin, instruction, instruction_attributes, instruction_options}]}
  noun_lexicon.json         the nouns of the generator's vocabulary: the title-score noun tagger (replaces spaCy)

Run `python envs/webshop/generate_catalog.py` from the repo root; it overwrites agentforge/envs/webshop/data/.
Same seed, same bytes.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path

SEED = 20260
NUM_PRODUCTS = 1000
NUM_INSTRUCTIONS = 1500
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "agentforge" / "envs" / "webshop" / "data"

COLORS = ["black", "white", "navy blue", "grey", "red", "pink", "beige", "olive green", "brown", "light blue",
          "purple", "yellow", "burgundy", "teal", "silver", "gold", "khaki", "coral"]
APPAREL_SIZES = ["x-small", "small", "medium", "large", "x-large", "xx-large"]
SHOE_SIZES = ["6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "11", "12"]
SCENTS = ["lavender", "citrus", "unscented", "vanilla", "coconut", "eucalyptus", "rose", "sandalwood"]
FLAVORS = ["chocolate", "vanilla", "strawberry", "sea salt", "honey", "peanut butter", "cinnamon", "lemon",
           "original", "barbecue"]
OUNCES = ["2.6 ounce", "3.4 fl oz", "8 fl oz (pack of 1)", "16 fl oz", "1.7 ounce (pack of 2)", "12 ounce"]
COUNTS = ["pack of 1", "pack of 2", "pack of 3", "pack of 6", "12 count", "24 count"]
INCHES = ["12 inch", "16 inch", "18 inch", "20 inch", "24 inch", "30 inch"]
FURNITURE_SIZES = ["twin", "full", "queen", "king", "2x3 ft", "4x6 ft", "5x7 ft", "8x10 ft"]
CAPACITIES = ["32gb", "64gb", "128gb", "256gb", "512gb", "1tb"]
MATERIAL_STYLES = ["modern", "classic", "rustic", "farmhouse", "minimalist", "industrial"]


@dataclass(frozen=True)
class ProductType:
    """One kind of product: its search query, category path, title nouns, attribute pool and option groups."""

    category: str
    query: str
    path: tuple[str, ...]
    noun: str
    attributes: tuple[str, ...]
    options: dict[str, list[str]]
    audience: tuple[str, ...] = ()


BEAUTY = "Beauty & Personal Care"
ELECTRONICS = "Electronics"
FASHION = "Clothing, Shoes & Jewelry"
FOOD = "Grocery & Gourmet Food"
HOME = "Home & Kitchen"

TYPES: list[ProductType] = [
    # beauty
    ProductType("beauty", "deodorant", (BEAUTY, "Personal Care", "Deodorants & Antiperspirants", "Deodorants"),
                "deodorant stick", ("aluminum free", "long lasting", "sensitive skin", "natural ingredients",
                                    "cruelty free", "travel size"), {"scent": SCENTS, "size": OUNCES[:3]},
                ("women", "men")),
    ProductType("beauty", "hair extensions", (BEAUTY, "Hair Care", "Hair Extensions, Wigs & Accessories",
                                              "Hair Extensions"), "clip in hair extensions",
                ("natural looking", "heat resistant", "easy to use", "high quality", "long hair", "synthetic hair"),
                {"color": ["black", "brown", "blonde", "auburn", "ash blonde", "dark brown"], "size": INCHES}),
    ProductType("beauty", "face moisturizer", (BEAUTY, "Skin Care", "Face", "Creams & Moisturizers"),
                "face moisturizer cream", ("anti aging", "dry skin", "paraben free", "fragrance free", "fine lines",
                                           "hyaluronic acid", "oil free"), {"size": OUNCES}, ("women", "men")),
    ProductType("beauty", "shampoo", (BEAUTY, "Hair Care", "Shampoo & Conditioner", "Shampoos"),
                "shampoo", ("sulfate free", "hair growth", "dry hair", "natural ingredients", "color treated",
                            "tea tree"), {"scent": SCENTS, "size": OUNCES}),
    ProductType("beauty", "nail polish", (BEAUTY, "Foot, Hand & Nail Care", "Nail Art & Polish", "Nail Polish"),
                "gel nail polish set", ("long lasting", "non toxic", "quick drying", "easy to use", "high gloss"),
                {"color": COLORS}),
    ProductType("beauty", "makeup brushes", (BEAUTY, "Tools & Accessories", "Makeup Brushes & Tools",
                                             "Brush Sets"), "makeup brush set",
                ("synthetic bristles", "cruelty free", "travel size", "easy clean", "high quality"),
                {"color": ["rose gold", "black", "pink", "white", "purple"], "size": COUNTS[:4]}),
    ProductType("beauty", "lip balm", (BEAUTY, "Skin Care", "Lip Care", "Balms & Moisturizers"),
                "lip balm", ("natural ingredients", "dry lips", "long lasting", "spf protection", "beeswax"),
                {"flavor": ["mint", "vanilla", "strawberry", "honey", "coconut"], "size": COUNTS[:4]}),
    ProductType("beauty", "body wash", (BEAUTY, "Personal Care", "Bath & Bathing Accessories", "Body Washes"),
                "body wash", ("sensitive skin", "moisturizing", "paraben free", "natural ingredients",
                              "dry skin"), {"scent": SCENTS, "size": OUNCES}, ("women", "men")),
    # electronics
    ProductType("electronics", "wireless earbuds", (ELECTRONICS, "Headphones, Earbuds & Accessories",
                                                    "Headphones & Earbuds", "Earbud Headphones"),
                "wireless earbuds", ("noise cancelling", "water resistant", "fast charging", "long battery life",
                                     "hands free", "bluetooth"), {"color": ["black", "white", "navy blue", "pink"]}),
    ProductType("electronics", "phone case", (ELECTRONICS, "Cell Phones & Accessories", "Cases, Holsters & Sleeves",
                                              "Basic Cases"), "phone case",
                ("shockproof", "slim fit", "wireless charging", "scratch resistant", "easy install", "kickstand"),
                {"color": COLORS, "size": ["iphone 13", "iphone 14", "iphone 15", "galaxy s23", "pixel 8"]}),
    ProductType("electronics", "usb cable", (ELECTRONICS, "Computers & Accessories", "Computer Accessories",
                                             "Cables & Accessories"), "usb c charging cable",
                ("fast charging", "high speed", "braided nylon", "durable", "data transfer"),
                {"color": ["black", "white", "grey", "red"], "size": ["3 ft", "6 ft", "10 ft", "pack of 3"]}),
    ProductType("electronics", "bluetooth speaker", (ELECTRONICS, "Portable Audio & Video", "Portable Speakers",
                                                     "Bluetooth Speakers"), "portable bluetooth speaker",
                ("waterproof", "long battery life", "stereo sound", "hands free", "outdoor use"),
                {"color": ["black", "blue", "red", "grey", "olive green"]}),
    ProductType("electronics", "memory card", (ELECTRONICS, "Computers & Accessories", "Data Storage",
                                               "Memory Cards"), "micro sd memory card",
                ("high speed", "water resistant", "data transfer", "4k video", "durable"),
                {"size": CAPACITIES}),
    ProductType("electronics", "hdmi cable", (ELECTRONICS, "Television & Video", "Accessories", "Cables",
                                              "HDMI Cables"), "hdmi cable",
                ("high speed", "4k video", "gold plated", "braided nylon", "ultra hd"),
                {"size": ["3 ft", "6 ft", "10 ft", "15 ft", "25 ft"]}),
    ProductType("electronics", "wall charger", (ELECTRONICS, "Cell Phones & Accessories", "Accessories",
                                                "Chargers & Power Adapters"), "usb wall charger",
                ("fast charging", "compact design", "dual port", "overcharge protection", "travel size"),
                {"color": ["black", "white"], "size": COUNTS[:3]}),
    ProductType("electronics", "security camera", (ELECTRONICS, "Camera & Photo", "Video Surveillance",
                                                   "Surveillance Cameras"), "wifi security camera",
                ("night vision", "motion detection", "two way audio", "easy install", "high definition"),
                {"color": ["white", "black"], "size": ["1 camera", "2 cameras", "4 cameras"]}),
    # fashion
    ProductType("fashion", "running shoes", (FASHION, "Men", "Shoes", "Athletic", "Running"), "running shoes",
                ("rubber sole", "non slip", "lightweight", "breathable mesh", "arch support", "lace up"),
                {"color": COLORS, "size": SHOE_SIZES}, ("women", "men")),
    ProductType("fashion", "t-shirt", (FASHION, "Women", "Clothing", "Tops, Tees & Blouses", "T-Shirts"),
                "crew neck t-shirt", ("short sleeve", "machine wash", "cotton polyester", "classic fit",
                                      "soft material", "daily wear"), {"color": COLORS, "size": APPAREL_SIZES},
                ("women", "men")),
    ProductType("fashion", "yoga pants", (FASHION, "Women", "Clothing", "Active", "Active Pants"),
                "high waist yoga pants", ("tummy control", "elastic waistband", "moisture wicking", "machine wash",
                                          "stretch fabric", "pocket"), {"color": COLORS, "size": APPAREL_SIZES}),
    ProductType("fashion", "winter jacket", (FASHION, "Men", "Clothing", "Jackets & Coats", "Down Jackets"),
                "hooded winter jacket", ("water resistant", "zipper closure", "windproof", "warm lining",
                                         "machine wash", "detachable hood"),
                {"color": COLORS, "size": APPAREL_SIZES}, ("women", "men")),
    ProductType("fashion", "socks", (FASHION, "Men", "Clothing", "Socks", "Athletic Socks"), "ankle socks",
                ("moisture wicking", "cushioned sole", "breathable", "cotton blend", "machine wash"),
                {"color": ["black", "white", "grey", "multicolor"], "size": COUNTS[:4]}, ("women", "men")),
    ProductType("fashion", "sandals", (FASHION, "Women", "Shoes", "Sandals", "Flat Sandals"), "flat sandals",
                ("open toe", "ankle strap", "non slip", "rubber sole", "comfortable", "memory foam"),
                {"color": COLORS, "size": SHOE_SIZES}),
    ProductType("fashion", "sunglasses", (FASHION, "Men", "Accessories", "Sunglasses & Eyewear Accessories",
                                          "Sunglasses"), "polarized sunglasses",
                ("uv protection", "polarized lens", "lightweight frame", "metal frame", "classic style"),
                {"color": ["black", "gold", "silver", "brown", "blue"]}, ("women", "men")),
    ProductType("fashion", "backpack", (FASHION, "Luggage & Travel Gear", "Backpacks", "Laptop Backpacks"),
                "travel laptop backpack", ("water resistant", "usb charging port", "large capacity",
                                           "anti theft", "padded straps"), {"color": COLORS}),
    # food
    ProductType("food", "protein bars", (FOOD, "Snack Foods", "Bars", "Protein Bars"), "protein bars",
                ("gluten free", "high protein", "low sugar", "keto friendly", "individually wrapped", "plant based"),
                {"flavor": FLAVORS[:6], "size": COUNTS}),
    ProductType("food", "coffee", (FOOD, "Beverages", "Coffee, Tea & Cocoa", "Coffee", "Ground Coffee"),
                "ground coffee", ("medium roast", "dark roast", "fair trade", "organic", "arabica beans",
                                  "low acid"), {"flavor": ["original", "hazelnut", "vanilla", "caramel", "mocha"],
                                                "size": ["12 ounce", "2 pound", "pack of 2"]}),
    ProductType("food", "green tea", (FOOD, "Beverages", "Coffee, Tea & Cocoa", "Tea", "Green Tea"),
                "green tea bags", ("caffeine free", "organic", "individually wrapped", "natural ingredients",
                                   "non gmo"), {"flavor": ["original", "jasmine", "mint", "lemon", "honey"],
                                                "size": ["20 count", "40 count", "100 count"]}),
    ProductType("food", "potato chips", (FOOD, "Snack Foods", "Chips & Crisps", "Potato Chips"),
                "kettle potato chips", ("gluten free", "non gmo", "individually wrapped", "no artificial flavors",
                                        "vegan"), {"flavor": ["sea salt", "barbecue", "sour cream", "jalapeno",
                                                              "salt and vinegar"], "size": COUNTS}),
    ProductType("food", "olive oil", (FOOD, "Pantry Staples", "Cooking Oils", "Olive Oils"),
                "extra virgin olive oil", ("cold pressed", "organic", "non gmo", "kosher", "first harvest"),
                {"size": ["16.9 fl oz", "25.3 fl oz", "33.8 fl oz", "pack of 2"]}),
    ProductType("food", "dark chocolate", (FOOD, "Candy & Chocolate", "Chocolate", "Chocolate Bars"),
                "dark chocolate bar", ("sugar free", "vegan", "fair trade", "individually wrapped", "keto friendly",
                                       "gift box"), {"flavor": ["sea salt", "orange", "mint", "almond", "original"],
                                                     "size": COUNTS[:4]}),
    ProductType("food", "dog treats", (FOOD, "Pet Food", "Dogs", "Treats"), "dog treats",
                ("grain free", "natural ingredients", "made in usa", "high protein", "small breed"),
                {"flavor": ["chicken", "beef", "salmon", "peanut butter", "bacon"], "size": ["8 ounce", "1 pound",
                                                                                            "2 pound"]}),
    ProductType("food", "honey", (FOOD, "Breakfast Foods", "Honey", "Raw Honey"), "raw honey",
                ("raw unfiltered", "organic", "non gmo", "gluten free", "glass jar"),
                {"size": ["12 ounce", "16 ounce", "32 ounce", "pack of 2"]}),
    # home
    ProductType("home", "area rug", (HOME, "Home Decor Products", "Area Rugs, Runners & Pads", "Area Rugs"),
                "area rug", ("non slip", "living room", "easy clean", "machine washable", "stain resistant",
                             "soft touch"), {"color": COLORS, "size": FURNITURE_SIZES[4:]}),
    ProductType("home", "bed sheets", (HOME, "Bedding", "Sheets & Pillowcases", "Sheet & Pillowcase Sets"),
                "bed sheet set", ("deep pocket", "machine washable", "wrinkle free", "breathable", "egyptian cotton",
                                  "soft microfiber"), {"color": COLORS, "size": FURNITURE_SIZES[:4]}),
    ProductType("home", "coffee table", (HOME, "Furniture", "Living Room Furniture", "Tables", "Coffee Tables"),
                "coffee table", ("solid wood", "storage space", "easy assembly", "living room", "metal legs",
                                 "mid century"), {"color": ["brown", "black", "white", "walnut", "grey"],
                                                  "style": MATERIAL_STYLES}),
    ProductType("home", "throw pillow covers", (HOME, "Home Decor Products", "Decorative Pillows, Inserts & Covers",
                                                "Throw Pillow Covers"), "throw pillow covers",
                ("living room", "hidden zipper", "machine washable", "double sided", "soft velvet"),
                {"color": COLORS, "size": ["16x16 inch", "18x18 inch", "20x20 inch"]}),
    ProductType("home", "shower curtain", (HOME, "Bath", "Shower Curtains, Hooks & Liners", "Shower Curtains"),
                "shower curtain", ("waterproof", "machine washable", "mildew resistant", "hooks included",
                                   "heavy duty"), {"color": COLORS, "size": ["72x72 inch", "72x84 inch",
                                                                            "36x72 inch"]}),
    ProductType("home", "office chair", (HOME, "Furniture", "Home Office Furniture", "Home Office Chairs"),
                "ergonomic office chair", ("lumbar support", "adjustable height", "easy assembly", "breathable mesh",
                                           "swivel wheels", "heavy duty"), {"color": ["black", "grey", "white",
                                                                                      "blue", "pink"]}),
    ProductType("home", "storage baskets", (HOME, "Storage & Organization", "Baskets, Bins & Containers",
                                            "Storage Baskets"), "woven storage baskets",
                ("foldable", "easy clean", "storage space", "living room", "handles included"),
                {"color": ["beige", "grey", "white", "brown", "black"], "size": COUNTS[:4]}),
    ProductType("home", "candles", (HOME, "Home Decor Products", "Candles & Holders", "Candles", "Jar Candles"),
                "scented jar candle", ("soy wax", "long lasting", "natural ingredients", "gift set",
                                       "lead free wick"), {"scent": SCENTS, "size": COUNTS[:3]}),
]

# Words the title-score noun tagger counts: product nouns, brands and the nouns inside attribute/option phrases.
# Adjectives, colours, numbers and units are not nouns (the title score compares what the products *are*).
NOUN_WORDS = {
    "deodorant", "stick", "hair", "extensions", "face", "moisturizer", "cream", "shampoo", "nail", "polish", "set",
    "makeup", "brush", "lip", "balm", "body", "wash", "earbuds", "phone", "case", "cable", "charging", "speaker",
    "memory", "card", "sd", "hdmi", "charger", "wall", "camera", "security", "wifi", "shoes", "t-shirt", "neck",
    "crew", "pants", "yoga", "waist", "jacket", "socks", "sandals", "sunglasses", "backpack", "laptop", "travel",
    "bars", "protein", "coffee", "tea", "bags", "chips", "potato", "oil", "olive", "chocolate", "bar", "dog",
    "treats", "honey", "rug", "area", "bed", "sheet", "table", "pillow", "covers", "shower", "curtain", "chair",
    "office", "baskets", "storage", "candle", "jar", "women", "men", "usb", "bluetooth", "skin", "sole", "ingredients",
    "aluminum", "bristles", "spf", "protection", "beeswax", "battery", "life", "sound", "video", "port", "design",
    "vision", "motion", "detection", "audio", "rubber", "mesh", "arch", "support", "sleeve", "cotton", "polyester",
    "fit", "material", "wear", "tummy", "control", "waistband", "fabric", "pocket", "zipper", "closure", "lining",
    "hood", "toe", "strap", "foam", "uv", "lens", "frame", "style", "capacity", "theft", "straps", "sugar", "roast",
    "trade", "beans", "acid", "caffeine", "gmo", "flavors", "harvest", "box", "grain", "breed", "glass",
    "room", "touch", "microfiber", "wood", "space", "assembly", "legs", "century", "velvet", "hooks",
    "duty", "lumbar", "height", "wheels", "handles", "wax", "wick", "gift", "tree", "lines", "hyaluronic",
}

BRAND_ONSETS = ["Ar", "Bel", "Cor", "Dav", "El", "Fen", "Gal", "Hal", "Is", "Jor", "Kel", "Lum", "Mar", "Nor",
                "Or", "Pel", "Quin", "Ros", "Sol", "Tor", "Ul", "Ver", "Wyn", "Zel"]
BRAND_CODAS = ["ana", "ora", "ix", "ella", "ova", "ent", "ique", "ara", "ion", "ette", "ovo", "une", "ada", "eon"]

FILLER_SENTENCES = [
    "Designed for everyday use at home, at work or on the go.",
    "Backed by a friendly customer service team and a 30-day return policy.",
    "Each order is inspected by hand before it ships.",
    "A thoughtful gift for family and friends on any occasion.",
    "Made to the same careful standard as every product we sell.",
    "Packed in recyclable packaging to reduce waste.",
]
REVIEW_TITLES = ["Exactly as described", "Great value", "Would buy again", "Not bad", "Disappointed",
                 "Love it", "Works well", "Decent for the price"]
REVIEW_BODIES = ["Arrived quickly and works as advertised.", "Quality is better than I expected for the price.",
                 "It does the job, nothing special.", "The colour was a bit different from the photos.",
                 "My second time ordering this; still happy with it.", "Stopped working after a few weeks."]
INSTRUCTION_TEMPLATES = [
    "i need {article} {attrs} {noun}{opts}",
    "i am looking for {article} {noun} that is {attrs}{opts}",
    "i want to buy {article} {attrs} {noun}{opts}",
    "find me {article} {noun} which is {attrs}{opts}",
    "i'm looking for {article} {attrs} {noun}{opts}",
]


def brand_names(rng: random.Random, count: int) -> list[str]:
    names: set[str] = set()
    while len(names) < count:
        names.add(rng.choice(BRAND_ONSETS) + rng.choice(BRAND_CODAS) + rng.choice(["", "", "a", "o", "is"]))
    return sorted(names)


def asin(rng: random.Random, taken: set[str]) -> str:
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
    while True:
        code = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        if code not in taken:
            taken.add(code)
            return code


def title_case(text: str) -> str:
    return " ".join(w if any(c.isdigit() for c in w) else w.capitalize() for w in text.split())


def make_pricing(rng: random.Random) -> str:
    low = round(rng.uniform(5, 120), 2)
    if rng.random() < 0.15:
        high = round(low + rng.uniform(2, 25), 2)
        return f"${low:.2f} - ${high:.2f}"
    return f"${low:.2f}"


def make_product(rng: random.Random, kind: ProductType, brand: str, code: str) -> tuple[dict, list[str]]:
    attributes = rng.sample(kind.attributes, k=min(len(kind.attributes), rng.randint(3, 5)))
    audience = rng.choice(kind.audience) if kind.audience and rng.random() < 0.7 else ""
    in_title = attributes[:2] if rng.random() < 0.6 else attributes[:1]
    name = f"{brand} {title_case(in_title[0])} {title_case(kind.noun)}"
    if audience:
        name += f" for {audience.capitalize()}"
    if len(in_title) > 1:
        name += f", {title_case(in_title[1])}"
    options = {}
    for option_name, values in kind.options.items():
        count = min(len(values), rng.randint(2, 5))
        picked = sorted(rng.sample(range(len(values)), k=count))
        options[option_name.capitalize()] = [{"value": values[i], "image": None} for i in picked]
    bullets = [f"{title_case(a)}: a {kind.noun} with {a} you can rely on every day." for a in attributes[1:]]
    bullets.append(rng.choice(FILLER_SENTENCES))
    description = (f"The {brand} {kind.noun} comes with {attributes[0]}. "
                   f"{rng.choice(FILLER_SENTENCES)} {rng.choice(FILLER_SENTENCES)}")
    reviews = [
        {"title": rng.choice(REVIEW_TITLES), "score": rng.randint(1, 5), "body": rng.choice(REVIEW_BODIES)}
        for _ in range(rng.randint(0, 3))
    ]
    rating = round(sum(r["score"] for r in reviews) / len(reviews), 1) if reviews else None
    product = {
        "asin": code,
        "name": name,
        "category": kind.category,
        "query": kind.query,
        "product_category": " › ".join(kind.path),
        "full_description": description,
        "small_description": bullets,
        "pricing": make_pricing(rng),
        "customization_options": options,
        "images": [""],
        "average_rating": rating,
        "reviews": reviews,
    }
    return product, attributes


def make_instruction(rng: random.Random, product: dict, attributes: list[str], kind: ProductType) -> dict:
    chosen = rng.sample(attributes, k=rng.randint(1, min(3, len(attributes))))
    options = []
    phrases = []
    for option_name, values in product["customization_options"].items():
        if rng.random() < 0.65:
            value = rng.choice(values)["value"]
            options.append(value)
            phrases.append(f"{option_name.lower()} {value}")
    noun = kind.noun if rng.random() < 0.5 else kind.query
    attrs = " and ".join(chosen)
    opts = (" with " + " and ".join(phrases)) if phrases else ""
    template = rng.choice(INSTRUCTION_TEMPLATES)
    first = (attrs if "{attrs} {noun}" in template else noun)
    article = "an" if first[0] in "aeiou" else "a"
    if noun.endswith("s") and not noun.endswith("ss") and "{attrs} {noun}" in template:
        article = "some"
    text = template.format(article=article, attrs=attrs, noun=noun, opts=opts)
    return {"asin": product["asin"], "instruction": text, "instruction_attributes": chosen,
            "instruction_options": options}


def generate(
    seed: int = SEED, num_products: int = NUM_PRODUCTS, num_instructions: int = NUM_INSTRUCTIONS
) -> tuple[list[dict], dict[str, dict], dict[str, list[dict]], list[str]]:
    """Products, attributes, instructions and the noun lexicon; the same seed gives the same catalog."""
    rng = random.Random(seed)
    brands = brand_names(rng, 150)
    taken: set[str] = set()
    products, attributes, kinds = [], {}, {}
    for i in range(num_products):
        kind = TYPES[i % len(TYPES)]
        product, attrs = make_product(rng, kind, rng.choice(brands), asin(rng, taken))
        products.append(product)
        attributes[product["asin"]] = {"attributes": attrs}
        kinds[product["asin"]] = kind
    rng.shuffle(products)  # like items_shuffle: no order by category
    instructions: dict[str, list[dict]] = {}
    order = [products[i % len(products)] for i in range(num_instructions)]
    for product in order:
        code = product["asin"]
        ins = make_instruction(rng, product, attributes[code]["attributes"], kinds[code])
        instructions.setdefault(code, []).append(ins)
    nouns = set(NOUN_WORDS) | {b.lower() for b in brands}
    return products, attributes, instructions, sorted(nouns)


def write(out: Path, seed: int = SEED) -> None:
    products, attributes, instructions, nouns = generate(seed)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "items_shuffle_1000.json": products,
        "items_ins_v2_1000.json": attributes,
        "items_human_ins.json": instructions,
        "noun_lexicon.json": nouns,
    }
    for name, payload in files.items():
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        (out / name).write_text(text + "\n", encoding="utf-8")
        print(f"wrote {out / name} ({len(text.encode()) / 1024:.0f} KiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: the package's data)")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    write(args.out, args.seed)


if __name__ == "__main__":
    main()
