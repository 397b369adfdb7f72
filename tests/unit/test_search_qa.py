"""Search QA env: BM25 search over the bundled knowledge base, exact-match answers, multi-hop, Search-R1 loading."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from agentforge.agent.parsing import parse_response
from agentforge.agent.prompts import prompt_for
from agentforge.envs.base import make_env
from agentforge.envs.search_qa import SearchQAEnv, exact_match, normalize_answer, parse_action
from agentforge.envs.search_qa.data import BUNDLED_DATA_DIR, Question, load_corpus, load_questions
from agentforge.envs.search_qa.expert import expert_actions
from agentforge.errors import ConfigError
from agentforge.types import Task

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SPLIT_BASE = {"train": 0, "eval": 1_000_000, "test": 2_000_000}


def task(seed: int, split: str = "train") -> Task:
    return Task(env="search_qa", seed=SPLIT_BASE[split] + seed, split=split)


@pytest.fixture(scope="module")
def env() -> SearchQAEnv:
    return SearchQAEnv()


def first(split: str, qtype: str) -> Question:
    """The first bundled question of a generator question type (the type is only in the file)."""
    rows = [json.loads(line) for line in (BUNDLED_DATA_DIR / f"{split}.jsonl").open()]
    wanted = next(row["id"] for row in rows if row["type"] == qtype)
    return next(q for q in load_questions(split) if q.id == wanted)


# -- data -----------------------------------------------------------------------------------------------------------
def test_bundled_data_sizes_and_disjoint_splits() -> None:
    corpus = load_corpus()
    assert 2000 <= len(corpus.passages) <= 5000 and len({p.id for p in corpus.passages}) == len(corpus.passages)
    splits = {s: load_questions(s) for s in ("train", "eval", "test")}
    assert {s: len(q) for s, q in splits.items()} == {"train": 1000, "eval": 200, "test": 200}
    texts = {s: {q.question for q in qs} for s, qs in splits.items()}
    assert not (texts["train"] & texts["eval"]) and not (texts["train"] & texts["test"])
    assert not (texts["eval"] & texts["test"])
    for qs in splits.values():
        hops = [q.hops for q in qs]
        assert set(hops) == {1, 2} and 0.35 < hops.count(2) / len(hops) < 0.65
    ids = {p.id for p in corpus.passages}
    assert all(set(q.supporting_ids) <= ids for qs in splits.values() for q in qs)


def test_bundled_data_matches_its_generator() -> None:
    spec = importlib.util.spec_from_file_location("qa_gen", REPO / "envs" / "search_qa" / "generate_kb.py")
    gen = importlib.util.module_from_spec(spec)
    sys.modules["qa_gen"] = gen
    try:
        spec.loader.exec_module(gen)
    finally:
        del sys.modules["qa_gen"]
    corpus, splits = gen.generate()
    read = lambda name: [json.loads(line) for line in (BUNDLED_DATA_DIR / name).open()]  # noqa: E731
    assert read("corpus.jsonl") == corpus
    assert all(read(f"{split}.jsonl") == rows for split, rows in splits.items())


def test_every_bundled_question_is_solvable_by_its_expert_searches() -> None:
    for split, count in (("train", 1000), ("eval", 200), ("test", 200)):
        assert all(expert_actions(task(seed, split)) is not None for seed in range(count)), split


# -- episodes -------------------------------------------------------------------------------------------------------
def test_search_then_answer_earns_reward_one(env: SearchQAEnv) -> None:
    obs = env.reset(task(0, "test"))
    question = env.question
    assert obs.text == f"Question: {question.question}\nYou have 4 turn(s) left."
    assert obs.admissible is None and obs.anchor == question.question
    searched = env.step(f"search[{question.expert_queries[0]}]")
    text = searched.observation.text
    assert searched.reward == 0.0 and not searched.done
    assert text.startswith(f"Question: {question.question}\n<information>\nDoc 1(Title: ")
    assert "\nDoc 3(Title: " in text and "</information>\nYou have 3 turn(s) left." in text
    retrieved = searched.info["retrieved_ids"]
    assert len(retrieved) == 3 and question.supporting_ids[0] in retrieved
    assert searched.observation.anchor == f"{question.question} || retrieved: {','.join(retrieved)}"
    for query in question.expert_queries[1:]:
        env.step(f"search[{query}]")
    answered = env.step(f"answer[The {question.golden_answers[0]}.]")  # articles and punctuation are ignored
    assert answered.done and answered.won and answered.reward == 1.0
    assert answered.info["em"] and answered.info["task_score"] == 1.0
    with pytest.raises(RuntimeError, match="over"):
        env.step("answer[x]")


def test_wrong_answer_earns_zero(env: SearchQAEnv) -> None:
    env.reset(task(1, "test"))
    result = env.step("answer[Atlantis]")
    assert result.done and not result.won and result.reward == 0.0
    assert result.info["golden_answers"] == list(env.question.golden_answers) and not result.info["em"]


@pytest.mark.parametrize(
    ("prediction", "golden", "expected"),
    [
        ("The Brannic Sea.", ["Brannic Sea"], True),
        ("  brannic   SEA ", ["Brannic Sea"], True),
        ("an apple", ["Apple"], True),
        ("1,984", ["1984"], True),
        ("Brannic", ["Brannic Sea"], False),
        ("the sea of brannic", ["Brannic Sea"], False),
        ("412 km", ["412", "412 km"], True),
        ("thea", ["a"], False),
    ],
)
def test_answer_normalisation(prediction: str, golden: list[str], expected: bool) -> None:
    assert exact_match(prediction, golden) is expected


def test_normalize_answer() -> None:
    assert normalize_answer("The  Kessic-Sea, an Ocean!") == "kessicsea ocean"


def test_multi_hop_question_is_solved_by_two_searches(env: SearchQAEnv) -> None:
    """Read the bridge entity out of the first search's passage, search it, read the answer out of the second."""
    question = first("test", "company_founder_country")
    env.reset_to_question(question)
    company = re.match(r"In which country was the founder of (.+) born\?", question.question).group(1)
    hop1 = env.step(f"search[{company} founder]").observation.text
    founder = re.search(rf"{re.escape(company)} is an? [\w ]+ company founded in \d+ by ([\w ]+?)\.", hop1).group(1)
    hop2 = env.step(f"search[{founder} born]").observation.text
    country = re.search(rf"{re.escape(founder)} was born in \w+, a city in (\w+)\.", hop2).group(1)
    result = env.step(f"answer[{country}]")
    assert result.won and result.reward == 1.0 and env.turns_taken == 3
    assert question.hops == 2


def test_turn_limit_and_invalid_actions() -> None:
    env = SearchQAEnv(max_turns=3)
    obs = env.reset(task(2))
    invalid = env.step("I think the answer is Paris")
    assert invalid.info["invalid_action"] and not invalid.done and invalid.reward == 0.0
    assert "Invalid action" in invalid.observation.text and invalid.observation.anchor == obs.anchor
    assert env.step("search[]").info["invalid_action"]
    last = env.step("search[river]")
    assert last.done and not last.won and last.reward == 0.0 and last.info["truncated"]
    with pytest.raises(ConfigError, match="max_turns"):
        SearchQAEnv(max_turns=0)
    assert parse_action(" Answer [ New  York ] ") == ("answer", "New York")
    assert parse_action("search: x") is None


def test_same_task_same_episode_via_registry() -> None:
    a, b = make_env("search_qa"), make_env("search_qa", {"top_k": 3})
    assert a.reset(task(5, "eval")) == b.reset(task(5, "eval"))
    assert a.step("search[river sea]") == b.step("search[river sea]")
    c = make_env("search_qa", {"top_k": 5})
    c.reset(task(5, "eval"))
    assert len(c.step("search[river sea]").info["retrieved_ids"]) == 5


def test_template_action_format_parses_to_env_actions() -> None:
    template = prompt_for("search_qa")
    assert template.action_tag == "search|answer"
    parsed = parse_response("<think>find it</think><search>Drelix Systems founder</search>", None,
                            template.action_tag, template.require_think)
    assert parsed.valid and parse_action(parsed.action) == ("search", "Drelix Systems founder")
    parsed = parse_response("<think>got it</think>\n<answer> Pelland </answer>", None, template.action_tag)
    assert parsed.valid and parse_action(parsed.action) == ("answer", "Pelland")
    relaxed = parse_response("so <answer>Pelland</answer> I think", None, template.action_tag)
    assert not relaxed.valid and relaxed.action == "answer[Pelland]"
    mismatched = parse_response("<think>x</think><search>q</answer>", None, template.action_tag)
    assert mismatched.action is None and not mismatched.valid
    user = template.messages(SearchQAEnv().reset(task(0)), [], 1)[-1]["content"]
    assert "<search>query</search>" in user and "<answer>answer</answer>" in user


# -- Search-R1-style data from data_dir -----------------------------------------------------------------------------
def test_search_r1_style_folder(tmp_path: Path) -> None:
    corpus = [
        {"id": "0", "contents": '"Zorvik"\nZorvik is the capital of Pelandria.'},
        {"id": "1", "contents": '"Pelandria"\nPelandria uses the drel as its currency.'},
        {"id": "2", "title": "Omvar", "text": "The Omvar flows into the Kessic Sea."},
    ]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "What is the capital of Pelandria?",
                                                      "golden_answers": ["Zorvik"]}) + "\n")
    (tmp_path / "dev.jsonl").write_text(json.dumps({"id": "d1", "question": "Where does the Omvar flow?",
                                                    "answer": "Kessic Sea"}) + "\n")
    env = SearchQAEnv(data_dir=str(tmp_path), top_k=2)
    env.reset(task(0))
    hits = env.step("search[capital Pelandria]")
    assert hits.info["retrieved_ids"][0] == "0" and "Doc 1(Title: Zorvik) Zorvik is the capital" in \
        hits.observation.text
    assert env.step("answer[zorvik]").won
    env.reset(task(0, "eval"))  # the eval split is read from dev.jsonl
    assert env.question.id == "d1" and env.question.golden_answers == ("Kessic Sea",)
    assert "Doc 1(Title: Omvar) The Omvar flows" in env.step("search[Omvar]").observation.text
    with pytest.raises(ConfigError, match="test.jsonl"):
        env.reset(task(0, "test"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "corpus.jsonl").write_text(json.dumps({"id": "0", "body": "x"}) + "\n")
    with pytest.raises(ConfigError, match="contents"):
        SearchQAEnv(data_dir=str(tmp_path / "bad"))


def test_search_r1_parquet_questions(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    (tmp_path / "corpus.jsonl").write_text(json.dumps({"id": "0", "contents": '"A"\nB is C.'}) + "\n")
    table = pa.table({"question": ["What is B?"],
                      "reward_model": [{"ground_truth": {"target": ["C"]}, "style": "rule"}]})
    pq.write_table(table, tmp_path / "test.parquet")
    env = SearchQAEnv(data_dir=str(tmp_path))
    env.reset(task(0, "test"))
    assert env.question.golden_answers == ("C",) and env.step("answer[c]").won
