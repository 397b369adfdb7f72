"""Generate agentforge's search-QA data: a synthetic knowledge base, its passages and single/multi-hop questions.

Why synthetic: a wiki-scale corpus does not fit here (FACTS), and invented names keep answers unguessable, so
reward comes from retrieval, not from what a model memorised. Every entity (countries, cities, rivers, seas,
people, companies, festivals, awards) gets invented unique names; facts are rendered into short passages in the
Search-R1 corpus format, and questions ask for one fact (one passage) or chain two facts through a bridge entity
(two passages, e.g. "In which country was the founder of X born?").

Writes, in Search-R1's formats (one JSON object per line):
  corpus.jsonl                      {"id", "contents": "\"<title>\"\n<text>"}
  train.jsonl, eval.jsonl, test.jsonl  {"id", "question", "golden_answers", "hops", "type", "supporting_ids",
                                        "expert_queries"}

Run `python envs/search_qa/generate_kb.py` from the repo root; it overwrites agentforge/envs/search_qa/data/.
Same seed, same bytes.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path

SEED = 4242
SPLIT_SIZES = {"test": 200, "eval": 200, "train": 1000}
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "agentforge" / "envs" / "search_qa" / "data"

COUNTS = {"continent": 5, "sea": 8, "country": 24, "river": 60, "city": 240, "person": 700, "company": 220,
          "festival": 150, "award": 30}
OCCUPATIONS = ["painter", "engineer", "chemist", "architect", "novelist", "composer", "surgeon", "astronomer",
               "economist", "sculptor", "botanist", "journalist", "mathematician", "photographer", "diplomat"]
INDUSTRIES = ["shipbuilding", "software", "textile", "pharmaceutical", "aerospace", "food processing", "mining",
              "robotics", "publishing", "telecommunications", "glassmaking", "railway"]
FIELDS = ["science", "literature", "architecture", "music", "medicine", "engineering", "painting", "journalism"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
COMPANY_SUFFIXES = ["Industries", "Systems", "Works", "Dynamics", "Labs", "Holdings", "Group", "Manufacturing"]

ONSETS = ["b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "qu", "r", "s", "st", "t", "tr",
          "v", "vr", "z", "th", "sh"]
VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou", "y"]
CODAS = ["", "n", "r", "l", "s", "th", "sk", "nd", "rv", "x", "m", "lt"]
ENDINGS = {
    "continent": ["ara", "essa", "onia", "ethra", "ustra"],
    "sea": ["ic", "ian", "ene", "ish"],
    "country": ["ia", "ovia", "land", "estan", "aria", "enne", "or"],
    "river": ["a", "ar", "in", "el", "os", "un"],
    "city": ["vik", "mere", "port", "holm", "grad", "ton", "burg", "ford", "stad", "wick"],
    "first": ["a", "o", "en", "is", "ia", "an", "el", "ette", "us"],
    "surname": ["ski", "sen", "ard", "ov", "ez", "ley", "mann", "ova", "ic", "berg"],
    "company": ["ix", "ora", "eon", "ent", "ax", "ium", "elle", "ico"],
    "currency": ["", "a", "o", "et"],
    "product": ["o", "ar", "ex", "ium", "is", "um"],
    "festival": ["fest", "mas", "tide", "day", "ing"],
    "award": ["ian", "ine", "ard", "en"],
}


class Names:
    """Invented, globally unique names (no name is used for two entities of any kind)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def _stem(self, syllables: int) -> str:
        rng = self.rng
        return "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(syllables))

    def make(self, kind: str, syllables: tuple[int, int] = (1, 2)) -> str:
        while True:
            word = (self._stem(self.rng.randint(*syllables)) + self.rng.choice(ENDINGS[kind])).capitalize()
            if 4 <= len(word) <= 12 and word.lower() not in self.used:
                self.used.add(word.lower())
                return word


def build_entities(rng: random.Random) -> dict[str, list[dict]]:
    names = Names(rng)
    e: dict[str, list[dict]] = defaultdict(list)
    for _ in range(COUNTS["continent"]):
        e["continent"].append({"name": names.make("continent")})
    for _ in range(COUNTS["sea"]):
        e["sea"].append({"name": f"{names.make('sea')} Sea"})
    for _ in range(COUNTS["country"]):
        e["country"].append({"name": names.make("country"), "continent": rng.randrange(COUNTS["continent"]),
                             "currency": names.make("currency", (1, 1)).lower(),
                             "independence": rng.randint(1650, 1990)})
    for _ in range(COUNTS["river"]):
        e["river"].append({"name": names.make("river"), "country": rng.randrange(COUNTS["country"]),
                           "sea": rng.randrange(COUNTS["sea"]), "length": rng.randint(80, 2400)})
    rivers_by_country = defaultdict(list)
    for i, river in enumerate(e["river"]):
        rivers_by_country[river["country"]].append(i)
    for i in range(COUNTS["city"]):
        country = i % COUNTS["country"] if i < COUNTS["country"] else rng.randrange(COUNTS["country"])
        river = rng.choice(rivers_by_country[country] or range(COUNTS["river"]))
        e["city"].append({"name": names.make("city"), "country": country, "river": river,
                          "founded": rng.randint(800, 1900), "population": rng.randint(20, 2500) * 1000})
    for c, country in enumerate(e["country"]):  # every country's capital is one of its cities
        country["capital"] = next(i for i, city in enumerate(e["city"]) if city["country"] == c)
    for _ in range(COUNTS["award"]):
        e["award"].append({"name": f"{names.make('award')} Prize", "country": rng.randrange(COUNTS["country"]),
                           "field": rng.choice(FIELDS), "since": rng.randint(1850, 1990)})
    for _ in range(COUNTS["person"]):
        first, last = names.make("first", (1, 1)), names.make("surname", (1, 1))
        e["person"].append({"name": f"{first} {last}", "born": rng.randint(1890, 1995),
                            "city": rng.randrange(COUNTS["city"]), "occupation": rng.choice(OCCUPATIONS),
                            "award": rng.randrange(COUNTS["award"])})
    founders = rng.sample(range(COUNTS["person"]), COUNTS["company"])
    for i in range(COUNTS["company"]):
        e["company"].append({"name": f"{names.make('company')} {rng.choice(COMPANY_SUFFIXES)}",
                             "founder": founders[i], "city": rng.randrange(COUNTS["city"]),
                             "founded": rng.randint(1900, 2020), "industry": rng.choice(INDUSTRIES),
                             "product": names.make("product")})
    for person in e["person"]:
        person["employer"] = rng.randrange(COUNTS["company"])
    for i, company in enumerate(e["company"]):
        e["person"][company["founder"]]["employer"] = i
    for _ in range(COUNTS["festival"]):
        e["festival"].append({"name": f"{names.make('festival')} Festival", "city": rng.randrange(COUNTS["city"]),
                              "month": rng.choice(MONTHS), "since": rng.randint(1700, 2015)})
    return e


def render_passages(e: dict[str, list[dict]]) -> list[dict]:
    """One or two short passages per entity; `key` = (kind, index, part) ties a passage to its facts."""
    name = {kind: [x["name"] for x in items] for kind, items in e.items()}
    out = []

    def add(key: tuple[str, int, str], title: str, text: str) -> None:
        out.append({"key": key, "title": title, "text": text})

    for i, c in enumerate(e["country"]):
        add(("country", i, "main"), c["name"],
            f"{c['name']} is a country on the continent of {name['continent'][c['continent']]}. Its capital is "
            f"{name['city'][c['capital']]}. The national currency of {c['name']} is the {c['currency']}. "
            f"{c['name']} became independent in {c['independence']}.")
    for i, s in enumerate(e["sea"]):
        rivers = [r["name"] for r in e["river"] if name["sea"][r["sea"]] == s["name"]][:3]
        add(("sea", i, "main"), s["name"],
            f"The {s['name']} is a large body of salt water. Rivers that drain into it include the "
            f"{', the '.join(rivers) if rivers else 'many small streams'}.")
    for i, r in enumerate(e["river"]):
        add(("river", i, "main"), f"{r['name']} River",
            f"The {r['name']} River rises in {name['country'][r['country']]} and flows into the "
            f"{name['sea'][r['sea']]}. It is {r['length']} kilometres long.")
    for i, c in enumerate(e["city"]):
        add(("city", i, "main"), c["name"],
            f"{c['name']} is a city in {name['country'][c['country']]}. It lies on the {name['river'][c['river']]} "
            f"River and has about {c['population']:,} inhabitants. {c['name']} was founded in {c['founded']}.")
    for i, a in enumerate(e["award"]):
        add(("award", i, "main"), a["name"],
            f"The {a['name']} is an award for {a['field']} given every year in {name['country'][a['country']]} "
            f"since {a['since']}.")
    for i, p in enumerate(e["person"]):
        city = e["city"][p["city"]]
        add(("person", i, "bio"), p["name"],
            f"{p['name']} (born {p['born']}) is a {p['occupation']}. {p['name']} was born in {city['name']}, a "
            f"city in {name['country'][city['country']]}.")
        add(("person", i, "career"), p["name"],
            f"{p['name']} works for {name['company'][p['employer']]}. Over a long career as a {p['occupation']}, "
            f"{p['name']} received the {name['award'][p['award']]}.")
    for i, c in enumerate(e["company"]):
        add(("company", i, "main"), c["name"],
            f"{c['name']} is a {c['industry']} company founded in {c['founded']} by {name['person'][c['founder']]}. "
            f"Its headquarters are in {name['city'][c['city']]}. Its best known product is the {c['product']}.")
    for i, f in enumerate(e["festival"]):
        add(("festival", i, "main"), f["name"],
            f"The {f['name']} is held every {f['month']} in {name['city'][f['city']]}. It was first celebrated in "
            f"{f['since']}.")
    return out


def make_questions(e: dict[str, list[dict]], pid: dict[tuple[str, int, str], str]) -> dict[str, list[dict]]:
    """Candidate questions by type: question, golden answers, supporting passages, the expert's search queries."""
    n = {kind: [x["name"] for x in items] for kind, items in e.items()}
    qs: dict[str, list[dict]] = defaultdict(list)

    def q(kind: str, question: str, answers: list[str], support: list[tuple[str, int, str]], queries: list[str]):
        qs[kind].append({"question": question, "golden_answers": answers, "hops": len(support),
                         "type": kind, "supporting_ids": [pid[s] for s in support], "expert_queries": queries})

    for i, c in enumerate(e["country"]):
        s = [("country", i, "main")]
        q("country_capital", f"What is the capital of {c['name']}?", [n["city"][c["capital"]]], s,
          [f"{c['name']} capital"])
        q("country_currency", f"What is the currency of {c['name']}?", [c["currency"]], s,
          [f"{c['name']} currency"])
        q("country_continent", f"On which continent is {c['name']}?", [n["continent"][c["continent"]]], s,
          [f"{c['name']} continent"])
    for i, r in enumerate(e["river"]):
        s = [("river", i, "main")]
        q("river_sea", f"Into which sea does the {r['name']} River flow?", [n["sea"][r["sea"]]], s,
          [f"{r['name']} River"])
        q("river_length", f"How long is the {r['name']} River in kilometres?",
          [str(r["length"]), f"{r['length']} km", f"{r['length']} kilometres"], s, [f"{r['name']} River"])
    for i, c in enumerate(e["city"]):
        s = [("city", i, "main")]
        country, river = e["country"][c["country"]], e["river"][c["river"]]
        q("city_country", f"In which country is the city of {c['name']}?", [country["name"]], s,
          [f"{c['name']} city"])
        q("city_river", f"Which river flows through {c['name']}?", [river["name"], f"{river['name']} River"], s,
          [f"{c['name']} city river"])
        q("city_founded", f"In what year was the city of {c['name']} founded?", [str(c["founded"])], s,
          [f"{c['name']} city founded"])
        q("city_country_currency", f"What is the currency of the country in which {c['name']} lies?",
          [country["currency"]], [*s, ("country", c["country"], "main")],
          [f"{c['name']} city", f"{country['name']} currency"])
        q("city_river_sea", f"Into which sea does the river that flows through {c['name']} flow?",
          [n["sea"][river["sea"]]], [*s, ("river", c["river"], "main")],
          [f"{c['name']} city river", f"{river['name']} River"])
    for i, p in enumerate(e["person"]):
        bio, career = ("person", i, "bio"), ("person", i, "career")
        city = e["city"][p["city"]]
        country = e["country"][city["country"]]
        company = e["company"][p["employer"]]
        q("person_born_year", f"In what year was {p['name']} born?", [str(p["born"])], [bio], [f"{p['name']} born"])
        q("person_born_city", f"In which city was {p['name']} born?", [city["name"]], [bio], [f"{p['name']} born"])
        q("person_employer", f"Which company does {p['name']} work for?", [company["name"]], [career],
          [f"{p['name']} works for"])
        q("person_award", f"Which award did {p['name']} receive?", [n["award"][p["award"]]], [career],
          [f"{p['name']} received award"])
        q("person_country_capital", f"What is the capital of the country where {p['name']} was born?",
          [n["city"][country["capital"]]], [bio, ("country", city["country"], "main")],
          [f"{p['name']} born", f"{country['name']} capital"])
        q("person_country_continent", f"On which continent is the country where {p['name']} was born?",
          [n["continent"][country["continent"]]], [bio, ("country", city["country"], "main")],
          [f"{p['name']} born", f"{country['name']} continent"])
        q("person_employer_founder", f"Who founded the company that {p['name']} works for?",
          [n["person"][company["founder"]]], [career, ("company", p["employer"], "main")],
          [f"{p['name']} works for", f"{company['name']} founded"])
    for i, c in enumerate(e["company"]):
        s = [("company", i, "main")]
        founder = e["person"][c["founder"]]
        birth_city = e["city"][founder["city"]]
        hq = e["city"][c["city"]]
        q("company_founder", f"Who founded {c['name']}?", [founder["name"]], s, [f"{c['name']} founded"])
        q("company_city", f"In which city is {c['name']} headquartered?", [hq["name"]], s,
          [f"{c['name']} headquarters"])
        q("company_founded", f"In what year was {c['name']} founded?", [str(c["founded"])], s,
          [f"{c['name']} founded"])
        q("company_product", f"What is the best known product of {c['name']}?", [c["product"]], s,
          [f"{c['name']} product"])
        founder_bio = ("person", c["founder"], "bio")
        q("company_founder_country", f"In which country was the founder of {c['name']} born?",
          [n["country"][birth_city["country"]]], [*s, founder_bio], [f"{c['name']} founded", f"{founder['name']} born"])
        q("company_founder_year", f"In what year was the founder of {c['name']} born?", [str(founder["born"])],
          [*s, founder_bio], [f"{c['name']} founded", f"{founder['name']} born"])
        q("company_city_river", f"Which river flows through the city where {c['name']} is headquartered?",
          [n["river"][hq["river"]], f"{n['river'][hq['river']]} River"], [*s, ("city", c["city"], "main")],
          [f"{c['name']} headquarters", f"{hq['name']} city river"])
    for i, f in enumerate(e["festival"]):
        s = [("festival", i, "main")]
        city = e["city"][f["city"]]
        q("festival_city", f"In which city is the {f['name']} held?", [city["name"]], s, [f"{f['name']}"])
        q("festival_city_river", f"Which river flows through the city that hosts the {f['name']}?",
          [n["river"][city["river"]], f"{n['river'][city['river']]} River"], [*s, ("city", f["city"], "main")],
          [f"{f['name']}", f"{city['name']} city river"])
    for i, a in enumerate(e["award"]):
        q("award_country", f"In which country is the {a['name']} awarded?", [n["country"][a["country"]]],
          [("award", i, "main")], [f"{a['name']}"])
    return qs


def pick_questions(rng: random.Random, candidates: dict[str, list[dict]], total: int) -> list[dict]:
    """Half single-hop, half two-hop, spread evenly over question types."""
    picked = []
    for hops in (1, 2):
        types = sorted(k for k, items in candidates.items() if items[0]["hops"] == hops)
        pools = {t: rng.sample(candidates[t], len(candidates[t])) for t in types}
        want = total // 2 if hops == 1 else total - total // 2
        chosen: list[dict] = []
        while len(chosen) < want:
            for t in types:
                if pools[t] and len(chosen) < want:
                    chosen.append(pools[t].pop())
        picked += chosen
    rng.shuffle(picked)
    return picked


def generate(seed: int = SEED) -> tuple[list[dict], dict[str, list[dict]]]:
    rng = random.Random(seed)
    entities = build_entities(rng)
    passages = render_passages(entities)
    rng.shuffle(passages)
    pid = {p["key"]: f"p{i:05d}" for i, p in enumerate(passages)}
    corpus = [{"id": pid[p["key"]], "contents": f"\"{p['title']}\"\n{p['text']}"} for p in passages]
    questions = pick_questions(rng, make_questions(entities, pid), sum(SPLIT_SIZES.values()))
    splits, start = {}, 0
    for split, size in SPLIT_SIZES.items():
        splits[split] = [{"id": f"{split}-{i:04d}", **q} for i, q in enumerate(questions[start : start + size])]
        start += size
    return corpus, splits


def write(out: Path, seed: int = SEED) -> None:
    corpus, splits = generate(seed)
    out.mkdir(parents=True, exist_ok=True)
    files = {"corpus.jsonl": corpus, **{f"{split}.jsonl": rows for split, rows in splits.items()}}
    for name, rows in files.items():
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        (out / name).write_text(text, encoding="utf-8")
        print(f"wrote {out / name} ({len(rows)} rows, {len(text.encode()) / 1024:.0f} KiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: the package's data)")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    write(args.out, args.seed)


if __name__ == "__main__":
    main()
