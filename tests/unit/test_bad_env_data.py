"""Corrupted env data (issue 14, item 5, data part): a copy of each bundled file is truncated, emptied, replaced by
binary garbage, deleted, or given a wrong field type or a missing key; loading it must raise agentforge's
`DataFileError` (a `ConfigError`) whose message names the file (and line) and the fix, never a raw
JSONDecodeError/KeyError/UnicodeDecodeError from inside a loader."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from agentforge.envs.alfworld.games import BUNDLED_DIR as ALFWORLD_GAMES
from agentforge.envs.alfworld.games import load_bundle
from agentforge.envs.alfworld.intervention_cases import BUNDLED_CASES, load_cases
from agentforge.envs.base import make_env
from agentforge.envs.data_errors import DataFileError
from agentforge.envs.search_qa import data as search_data
from agentforge.envs.webshop import data as webshop_data
from agentforge.errors import ConfigError

pytestmark = pytest.mark.unit

GARBAGE = bytes(range(256)) * 8  # not UTF-8, not JSON, not gzip


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def garbage(path: Path) -> None:
    path.write_bytes(GARBAGE)


def empty(path: Path) -> None:
    path.write_bytes(b"")


def delete(path: Path) -> None:
    path.unlink()


FILE_CORRUPTIONS: dict[str, Callable[[Path], None]] = {"truncated": truncate, "binary": garbage, "empty": empty}


def assert_names_file_and_fix(err: pytest.ExceptionInfo, path: Path, fix: str, where: str = "") -> None:
    message = str(err.value)
    assert isinstance(err.value, ConfigError)
    assert str(path) in message, message
    assert fix in message, message
    assert where in message, message
    assert err.value.__cause__ is None or isinstance(err.value.__cause__, ConfigError)  # no raw error chained


# ---- search QA --------------------------------------------------------------------------------------------------
@pytest.fixture
def qa_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "qa"
    shutil.copytree(search_data.BUNDLED_DATA_DIR, folder)
    return folder


def _rewrite_line(path: Path, number: int, change: Callable[[dict], object]) -> None:
    lines = path.read_text().splitlines()
    lines[number - 1] = json.dumps(change(json.loads(lines[number - 1])))
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("corruption", sorted(FILE_CORRUPTIONS))
@pytest.mark.parametrize("name", ["corpus.jsonl", "train.jsonl"])
def test_search_qa_corrupted_file(qa_dir, name, corruption):
    path = qa_dir / name
    FILE_CORRUPTIONS[corruption](path)
    with pytest.raises(ConfigError) as err:
        env = make_env("search_qa", {"data_dir": str(qa_dir)})
        search_data.load_questions("train", str(qa_dir))
        del env
    assert_names_file_and_fix(err, path, "fix the line or the file")


def test_search_qa_line_not_json(qa_dir):
    path = qa_dir / "corpus.jsonl"
    lines = path.read_text().splitlines()
    lines[11] = lines[11][:-5]  # line 12 cut short
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFileError) as err:
        search_data.load_corpus(str(qa_dir))
    assert_names_file_and_fix(err, path, "fix the line", "line 12 is not JSON")


@pytest.mark.parametrize(("change", "where"), [
    (lambda row: [row], "line 7 is list, not a JSON object"),
    (lambda row: {k: v for k, v in row.items() if k != "question"}, "line 7 has no `question`"),
    (lambda row: {**row, "question": ["a", "list"]}, "line 7 `question` is list"),
    (lambda row: {**row, "golden_answers": {"a": 1}}, "line 7 `golden_answers` is dict"),
    (lambda row: {**row, "golden_answers": []}, "line 7 has an empty `golden_answers`"),
    (lambda row: {**row, "hops": "two"}, "line 7 has a field of the wrong type or value"),
    (lambda row: {**row, "supporting_ids": 5}, "line 7 `supporting_ids` is int"),
])
def test_search_qa_bad_question_line(qa_dir, change, where):
    path = qa_dir / "eval.jsonl"
    _rewrite_line(path, 7, change)
    with pytest.raises(DataFileError) as err:
        search_data.load_questions("eval", str(qa_dir))
    assert_names_file_and_fix(err, path, "fix the line", where)


def test_search_qa_bad_corpus_line_and_missing_corpus(qa_dir):
    path = qa_dir / "corpus.jsonl"
    _rewrite_line(path, 3, lambda row: {"id": row["id"], "body": "no contents"})
    with pytest.raises(DataFileError) as err:
        search_data.load_corpus(str(qa_dir))
    assert_names_file_and_fix(err, path, "fix the line", "line 3 has neither `contents` nor `text`")
    delete(path)
    with pytest.raises(ConfigError, match="corpus.jsonl not found"):
        search_data.load_corpus(str(qa_dir))


def test_search_qa_bundled_files_say_how_to_regenerate():
    assert "python envs/search_qa/generate_kb.py" in search_data.fix_for(search_data.BUNDLED_DATA_DIR / "x.jsonl")


# ---- WebShop ----------------------------------------------------------------------------------------------------
@pytest.fixture
def shop_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "shop"
    shutil.copytree(webshop_data.BUNDLED_DATA_DIR, folder)
    return folder


WEBSHOP_FILES = ["items_shuffle_1000.json", "items_ins_v2_1000.json", "items_human_ins.json", "noun_lexicon.json"]


@pytest.mark.parametrize("corruption", sorted(FILE_CORRUPTIONS))
@pytest.mark.parametrize("name", WEBSHOP_FILES)
def test_webshop_corrupted_file(shop_dir, name, corruption):
    path = shop_dir / name
    FILE_CORRUPTIONS[corruption](path)
    with pytest.raises(DataFileError) as err:
        make_env("webshop", {"data_dir": str(shop_dir)})
    assert_names_file_and_fix(err, path, "download the WebShop data again")
    if corruption == "truncated":
        assert "truncated?" in str(err.value)


def _edit_json(path: Path, change: Callable[[object], object]) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def _first_asin(shop_dir: Path) -> str:
    return json.loads((shop_dir / "items_shuffle_1000.json").read_text())[0]["asin"]


@pytest.mark.parametrize(("name", "change", "where"), [
    ("items_shuffle_1000.json", lambda d: {"products": d}, "the top level is dict, expected list"),
    ("items_shuffle_1000.json", lambda d: [5, *d], "product 0 is int, expected dict"),
    ("items_shuffle_1000.json", lambda d: [{**d[0], "customization_options": ["red"]}, *d[1:]],
     "product 0 (asin"),
    ("items_shuffle_1000.json", lambda d: [{**d[0], "pricing": {"$": 1}}, *d[1:]], None),  # tolerated: default
    ("items_ins_v2_1000.json", lambda d: list(d.values()), "the top level is list, expected dict"),
    ("items_ins_v2_1000.json", lambda d: {k: "x" for k in d}, "the entry of"),
    ("items_human_ins.json", lambda d: {k: {"instruction": "x"} for k in d}, "the entry of"),
    ("items_human_ins.json", lambda d: {k: [{kk: vv for kk, vv in i.items() if kk != "instruction"} for i in v]
                                        for k, v in d.items()}, "lacks the field 'instruction'"),
    ("noun_lexicon.json", lambda d: [1, 2, 3], "a word has a field of the wrong type"),
])
def test_webshop_wrong_structure(shop_dir, name, change, where):
    path = shop_dir / name
    _edit_json(path, change)
    if where is None:
        assert make_env("webshop", {"data_dir": str(shop_dir)}).catalog.products
        return
    with pytest.raises(DataFileError) as err:
        make_env("webshop", {"data_dir": str(shop_dir)})
    assert_names_file_and_fix(err, path, "download the WebShop data again", where)


def test_webshop_missing_file_and_bundled_fix(shop_dir):
    delete(shop_dir / "items_human_ins.json")
    with pytest.raises(ConfigError, match="has no human instructions file"):
        make_env("webshop", {"data_dir": str(shop_dir)})
    bundled = webshop_data.fix_for(webshop_data.BUNDLED_DATA_DIR / "items_human_ins.json")
    assert "python envs/webshop/generate_catalog.py" in bundled


# ---- ALFWorld: the bundled games and the intervention cases -----------------------------------------------------
def _gz_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt") as f:
        return f.read().splitlines()


def _write_gz(path: Path, lines: list[str]) -> None:
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    path = tmp_path / "valid_seen.jsonl.gz"
    shutil.copy(ALFWORLD_GAMES / "valid_seen.jsonl.gz", path)
    return path


@pytest.mark.parametrize("corruption", sorted(FILE_CORRUPTIONS))
def test_alfworld_corrupted_bundle(bundle, corruption):
    FILE_CORRUPTIONS[corruption](bundle)
    with pytest.raises(DataFileError) as err:
        load_bundle(str(bundle), "valid_seen")
    assert_names_file_and_fix(err, bundle, "python envs/alfworld/generate_games.py")


@pytest.mark.parametrize(("change", "where"), [
    (lambda line: line[: len(line) // 2], "line 5 is not JSON"),
    (lambda line: json.dumps({k: v for k, v in json.loads(line).items() if k != "pddl_problem"}),
     "line 5 lacks the field 'pddl_problem'"),
    (lambda line: json.dumps({**json.loads(line), "pddl_params": [1]}), "line 5 has a field of the wrong type"),
    (lambda line: json.dumps({**json.loads(line), "pddl_problem": 7}), "line 5 pddl_problem is int"),
    (lambda line: "[]", "line 5 is list, not a JSON object"),
])
def test_alfworld_bad_bundle_line(bundle, change, where):
    lines = _gz_lines(bundle)
    lines[4] = change(lines[4])
    _write_gz(bundle, lines)
    with pytest.raises(DataFileError) as err:
        load_bundle(str(bundle), "valid_seen")
    assert_names_file_and_fix(err, bundle, "python envs/alfworld/generate_games.py", where)


def test_alfworld_empty_gzip_bundle(bundle):
    _write_gz(bundle, [])
    with pytest.raises(DataFileError, match="holds no games"):
        load_bundle(str(bundle), "valid_seen")


@pytest.mark.parametrize("corruption", ["truncated", "binary", "missing key"])
def test_alfworld_corrupted_intervention_cases(tmp_path, corruption):
    path = tmp_path / "cases.jsonl.gz"
    shutil.copy(BUNDLED_CASES, path)
    if corruption == "missing key":
        lines = _gz_lines(path)
        lines[0] = json.dumps({k: v for k, v in json.loads(lines[0]).items() if k != "forbidden"})
        _write_gz(path, lines)
    else:
        FILE_CORRUPTIONS[corruption](path)
    with pytest.raises(ConfigError) as err:
        load_cases(str(path))
    assert_names_file_and_fix(err, path, "build_alfworld_interventions.py",
                              "line 1 lacks the field 'forbidden'" if corruption == "missing key" else "")


@pytest.mark.parametrize("corruption", ["truncated", "binary", "empty", "missing key"])
def test_alfworld_single_game_traj_data(tmp_path, corruption):
    from agentforge.envs.alfworld.env import folder_game

    game = tmp_path / "game"
    game.mkdir()
    (game / "game.tw-pddl").write_text("{}")
    traj = game / "traj_data.json"
    traj.write_text(json.dumps({"task_type": "pick_and_place_simple", "pddl_params": {"object_target": "Apple"}}))
    if corruption == "missing key":
        traj.write_text(json.dumps({"pddl_params": {}}))
    else:
        FILE_CORRUPTIONS[corruption](traj)
    with pytest.raises(DataFileError) as err:
        folder_game(game)
    assert_names_file_and_fix(err, traj, "regenerate it")
