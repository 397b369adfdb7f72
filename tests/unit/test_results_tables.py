"""Every claim is re-derivable: the results blocks of README.md and docs/ are what scripts/results_tables.py prints
from the per-task outcomes committed in docs/results/ (agentforge/evaluation/results.py), and a changed number
fails."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from agentforge.evaluation.results import RESULTS_DIR, decode, encode, export_result, load_results

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def tables_module():
    spec = importlib.util.spec_from_file_location("results_tables", ROOT / "scripts" / "results_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_results_block_in_the_docs_is_what_the_committed_outcomes_give():
    tables = tables_module()
    stale = tables.sync(tables.DOCS, load_results(RESULTS_DIR), write=False)
    assert stale == [], f"stale results blocks (python scripts/results_tables.py --write): {stale}"


def test_a_number_changed_in_a_block_is_caught(tmp_path):
    tables = tables_module()
    results = load_results(RESULTS_DIR)
    names = [name for name in tables.TABLES if _renders(tables, name, results)]
    if not names:
        pytest.skip("no committed results yet")
    doc = tmp_path / "doc.md"
    body = tables.render(names[0], results)
    doc.write_text(f"text\n<!-- results:{names[0]} -->\n{body}<!-- /results:{names[0]} -->\n")
    assert tables.sync([doc], results, write=False) == []
    digit = re.search(r"\d", body)
    changed = body[:digit.start()] + str((int(digit.group()) + 1) % 10) + body[digit.end():]
    doc.write_text(f"text\n<!-- results:{names[0]} -->\n{changed}<!-- /results:{names[0]} -->\n")
    assert len(tables.sync([doc], results, write=False)) == 1
    tables.sync([doc], results, write=True)
    assert body in doc.read_text()


def _renders(tables, name, results) -> bool:
    try:
        tables.render(name, results)
        return True
    except (KeyError, ValueError, IndexError):
        return False


def test_committed_results_say_how_they_were_made_and_decode_to_their_tasks():
    for result in load_results(RESULTS_DIR).values():
        record = result.record
        for key in ("command", "commit", "machine", "dtype", "wall_seconds", "held_out", "splits", "seed"):
            assert record.get(key) is not None, (result.name, key)
        test = record["splits"]["test"]
        assert len(set(test["tasks"])) == len(test["tasks"])  # distinct tasks
        for key in test["evals"]:
            assert set(result.outcomes(key)) == set(test["tasks"])
        assert all(m["trained_on"] == 0 for m in record["held_out"]["overlap"].values()), result.name


def test_outcomes_round_trip_and_a_run_exports_what_it_evaluated(tmp_path):
    tasks = ["a", "b", "c"]
    outcomes = {"a": [True, False], "b": [False, False], "c": [True, True]}
    assert decode(encode(outcomes, tasks), tasks, 2) == outcomes
    with pytest.raises(ValueError, match="outcomes for 3 tasks"):
        decode("101", tasks, 2)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 1\nmodel: {dtype: float32}\nalgorithm: {name: grpo}\nenv: {name: toy}\n"
                                     "trainer: {iterations: 2, tasks_per_iteration: 1, group_size: 2, eval_tasks: 3,\n"
                                     "  test_tasks: 3, eval_group_size: 1, eval_temperature: 0.4}\n")
    (run / "metrics.jsonl").write_text(json.dumps({"iteration": 2, "time/train_elapsed": 90.0, "time/test": 4.0})
                                       + "\n")
    single = {t: [v[0]] for t, v in outcomes.items()}
    summary = {"test": {"outcomes": {"0": single, "2": {t: [True] for t in tasks}}, "floor_outcomes": single},
               "held_out": {"overlap": {"test": {"tasks": 3, "trained_on": 0}}}}
    (run / "summary.json").write_text(json.dumps(summary))
    path = export_result(run, "toy/grpo_s1", "agentforge train recipe=toy seed=1", 61.0, folder=tmp_path / "results")
    result = load_results(tmp_path / "results")["toy/grpo_s1"]
    assert path.name == "toy__grpo_s1.json" and result.record["wall_seconds"] == 61.0
    assert result.outcomes("last") == {t: [True] for t in tasks} and result.floor() == single
    assert result.rate("0") == pytest.approx(2 / 3) and result.record["training_minutes"] == {"2": 1.5}
    assert "eval" not in result.record["splits"]  # the run has no eval-split outcomes: none exported
