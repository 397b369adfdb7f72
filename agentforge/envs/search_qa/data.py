"""Search-QA data: a passage corpus and question splits, bundled (generated) or Search-R1-style from `data_dir`.

Formats (the bundled files use them too):
- corpus: JSONL, one `{"id", "contents"}` per line, `contents` = `"<title>"\n<text>` (Search-R1's wiki-18 layout);
  `{"id", "title", "text"}` lines are accepted as well.
- questions: `<split>.jsonl` (or `<split>.parquet` when pyarrow or pandas is installed) with `question` and
  `golden_answers` (a list or one string; `answers`, `answer` and Search-R1's `reward_model.ground_truth.target`
  are read too). The eval split may be named eval, dev, validation or val.
Loaded once per process (per folder) and shared by every env, like the BM25 index over the corpus.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentforge.envs.data_errors import data_error, expect, iter_jsonl, record_errors
from agentforge.errors import ConfigError

BUNDLED_DATA_DIR = Path(__file__).resolve().parent / "data"
REGENERATE = "regenerate the bundled data with `python envs/search_qa/generate_kb.py`"
FORMAT_HINT = ('corpus lines are {"id", "contents": "\\"<title>\\"\\n<text>"}, question lines {"question", '
               '"golden_answers": [...]}')


def fix_for(path: Path) -> str:
    """What to do about a broken file: regenerate a bundled one, fix a user's one."""
    if path.resolve().parent == BUNDLED_DATA_DIR:
        return f"{REGENERATE} (or reinstall agentforge)"
    return f"fix the line or the file ({FORMAT_HINT}), or set env.data_dir=null for the bundled data"
SPLIT_FILE_NAMES = {"train": ("train",), "eval": ("eval", "dev", "validation", "val"), "test": ("test",)}


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str

    def render(self, rank: int) -> str:
        """Search-R1's passage format: `Doc 1(Title: <title>) <text>`."""
        return f"Doc {rank}(Title: {self.title}) {self.text}"


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    golden_answers: tuple[str, ...]
    hops: int = 0
    supporting_ids: tuple[str, ...] = ()
    expert_queries: tuple[str, ...] = ()


@dataclass
class Corpus:
    """Passages plus a BM25 index over them, built on first search."""

    passages: list[Passage]
    source: Path
    _index: Any = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def search(self, query: str, k: int) -> list[Passage]:
        if self._index is None:
            with self._lock:
                if self._index is None:
                    from agentforge.envs.bm25 import BM25Index

                    self._index = BM25Index([f"{p.title} {p.text}" for p in self.passages])
        return [self.passages[i] for i, _ in self._index.search(query, k)]


def _passage(row: dict[str, Any], line: int, path: Path) -> Passage:
    if "contents" in row:
        contents = str(row["contents"])
        first, _, rest = contents.partition("\n")
        if rest and first.startswith('"') and first.endswith('"'):
            title, text = first.strip('"'), rest.strip()
        else:
            title, text = str(row.get("title", "")), contents.strip()
    elif "text" in row:
        title, text = str(row.get("title", "")), str(row["text"]).strip()
    else:
        raise data_error(path, f"line {line} has neither `contents` nor `text`", fix_for(path))
    return Passage(str(row.get("id", line - 1)), title, text)


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    return list(iter_jsonl(path, fix_for(path)))


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    except ImportError:
        pass
    except Exception as err:  # pyarrow's ArrowInvalid and friends: a truncated or non-parquet file
        raise data_error(path, f"is not a readable parquet file ({type(err).__name__}: {err})", fix_for(path)) from None
    try:
        import pandas as pd
    except ImportError as err:
        raise ConfigError(f"reading {path} needs pyarrow or pandas: pip install pyarrow (or convert it to "
                          "JSONL)") from err
    try:
        return pd.read_parquet(path).to_dict(orient="records")
    except Exception as err:
        raise data_error(path, f"is not a readable parquet file ({type(err).__name__}: {err})", fix_for(path)) from None


def _answers(row: dict[str, Any], where: str, path: Path) -> tuple[str, ...]:
    value = row.get("golden_answers", row.get("answers", row.get("answer")))
    if value is None:
        value = ((row.get("reward_model") or {}).get("ground_truth") or {}).get("target")
    if value is None:
        raise data_error(path, f"{where} has no `golden_answers` (or answers/answer/reward_model.ground_truth.target)",
                         fix_for(path))
    if isinstance(value, str | int | float):
        return (str(value),)
    answers = tuple(str(v) for v in expect(value, (list, tuple), path, f"{where} `golden_answers`", fix_for(path)))
    if not answers:
        raise data_error(path, f"{where} has an empty `golden_answers` list", fix_for(path))
    return answers


def _question(row: dict[str, Any], index: int, split: str, where: str, path: Path) -> Question:
    if "question" not in row:
        raise data_error(path, f"{where} has no `question` field", fix_for(path))
    question = expect(row["question"], str, path, f"{where} `question`", fix_for(path)).strip()
    if not question:
        raise data_error(path, f"{where} has an empty `question`", fix_for(path))
    lists = {key: expect(row.get(key) or [], (list, tuple), path, f"{where} `{key}`", fix_for(path))
             for key in ("supporting_ids", "expert_queries")}
    return Question(
        id=str(row.get("id", f"{split}-{index}")),
        question=question,
        golden_answers=_answers(row, where, path),
        hops=int(row.get("hops") or 0),
        supporting_ids=tuple(str(s) for s in lists["supporting_ids"]),
        expert_queries=tuple(str(s) for s in lists["expert_queries"]),
    )


_CACHE: dict[tuple[str, ...], Any] = {}
_CACHE_LOCK = threading.Lock()


def _folder(data_dir: str | Path | None) -> Path:
    folder = Path(data_dir).expanduser().resolve() if data_dir else BUNDLED_DATA_DIR
    if not folder.is_dir():
        raise ConfigError(f"search_qa data_dir {folder} is not a folder; set env.data_dir to a folder with "
                          "corpus.jsonl and <split>.jsonl files, or null for the bundled data")
    return folder


def load_corpus(data_dir: str | Path | None = None, corpus_file: str = "corpus.jsonl") -> Corpus:
    path = _folder(data_dir) / corpus_file
    key = ("corpus", str(path))
    with _CACHE_LOCK:
        if key not in _CACHE:
            if not path.is_file():
                raise ConfigError(f"search_qa corpus {path} not found; set env.corpus_file to the corpus JSONL in "
                                  "env.data_dir")
            passages = []
            for line, row in _read_jsonl(path):
                with record_errors(path, f"line {line}", fix_for(path)):
                    passages.append(_passage(row, line, path))
            if not passages:
                raise data_error(path, "holds no passages (search_qa corpus)", fix_for(path))
            _CACHE[key] = Corpus(passages, path)
        return _CACHE[key]


def load_questions(split: str, data_dir: str | Path | None = None) -> list[Question]:
    if split not in SPLIT_FILE_NAMES:
        raise ConfigError(f"unknown search_qa split {split!r}; valid splits: {', '.join(SPLIT_FILE_NAMES)}")
    folder = _folder(data_dir)
    key = ("questions", str(folder), split)
    with _CACHE_LOCK:
        if key not in _CACHE:
            candidates = [folder / f"{name}.{ext}" for name in SPLIT_FILE_NAMES[split] for ext in ("jsonl", "parquet")]
            path = next((p for p in candidates if p.is_file()), None)
            if path is None:
                raise ConfigError(f"no {split} questions in {folder}; expected one of "
                                  f"{', '.join(p.name for p in candidates)}")
            if path.suffix == ".jsonl":
                rows = [(f"line {line}", row) for line, row in _read_jsonl(path)]
            else:
                rows = [(f"row {i}", row) for i, row in enumerate(_read_parquet(path))]
            questions = []
            for index, (where, row) in enumerate(rows):
                with record_errors(path, where, fix_for(path)):
                    questions.append(_question(row, index, split, where, path))
            if not questions:
                raise data_error(path, "holds no questions", fix_for(path))
            _CACHE[key] = questions
        return _CACHE[key]
