"""scripts/pooled_verdict.py: several seeds' evals, pooled task by task (a run's own gain) and over training seeds
(one method against another)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentforge.stats import paired_difference, seed_difference

pytestmark = pytest.mark.unit
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pooled_verdict.py"
SPLIT_EVAL = [sys.executable, str(SCRIPT), "--split", "eval"]  # these fixtures write eval-split outcomes


def run_with(tmp_path: Path, name: str, outcomes: dict[str, dict[str, list[bool]]]) -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"eval_outcomes": outcomes}))
    return run


def test_two_seeds_pool_each_tasks_outcomes_and_pick_the_last_eval(tmp_path):
    tasks = [f"t{i}" for i in range(40)]
    a = run_with(tmp_path, "s0", {"0": {t: [i % 4 == 0] for i, t in enumerate(tasks)},
                                  "5": {t: [False] for t in tasks},
                                  "10": {t: [i % 2 == 0] for i, t in enumerate(tasks)}})
    b = run_with(tmp_path, "s1", {"0": {t: [i % 5 == 0] for i, t in enumerate(tasks)},
                                  "10": {t: [i % 3 == 0] for i, t in enumerate(tasks)}})
    out = tmp_path / "verdict.json"
    done = subprocess.run(SPLIT_EVAL + [str(a), str(b), "--out", str(out)],
                          capture_output=True, text=True, check=True)
    report = json.loads(out.read_text())
    expected = paired_difference({t: [i % 4 == 0, i % 5 == 0] for i, t in enumerate(tasks)},
                                 {t: [i % 2 == 0, i % 3 == 0] for i, t in enumerate(tasks)})
    assert report["pooled"]["difference"] == pytest.approx(expected.difference)
    assert report["pooled"]["low"] == pytest.approx(expected.low) and report["pooled"]["episodes"] == 80
    assert report["runs"][str(a)]["after"] == pytest.approx(0.5)  # "last" is iteration 10, not 5
    assert "pooled over 2 runs task by task (eval noise only)" in done.stdout
    over_seeds = report["over_seeds"]  # the same gain with run-to-run variance: 2 seeds give no verdict
    assert over_seeds["per_seed"] == [pytest.approx(0.5 - 0.25), pytest.approx(14 / 40 - 8 / 40)]
    assert over_seeds["direction"] == "no verdict (2 seeds; need ≥ 3)" and not over_seeds["beyond_noise"]
    assert "over 2 training seeds" in done.stdout


def test_an_eval_a_run_lacks_is_named_with_those_it_has(tmp_path):
    run = run_with(tmp_path, "s0", {"0": {"t": [True]}, "10": {"t": [True]}})
    done = subprocess.run(SPLIT_EVAL + [str(run), "--before", "base"], capture_output=True, text=True)
    assert done.returncode != 0 and "has no eval 'base'; it has 0, 10" in done.stderr


def test_against_compares_two_methods_over_training_seeds_at_their_last_eval(tmp_path):
    tasks = [f"t{i}" for i in range(40)]
    seeds = (0, 1, 2)
    gigpo = [run_with(tmp_path, f"gigpo{s}", {"0": {t: [False] for t in tasks},
                                              "30": {t: [i % (2 + s) == 0] for i, t in enumerate(tasks)}})
             for s in seeds]
    grpo = [run_with(tmp_path, f"grpo{s}", {"0": {t: [True] for t in tasks},
                                            "30": {t: [i % (4 + s) == 0] for i, t in enumerate(tasks)}})
            for s in seeds]
    out = tmp_path / "verdict.json"
    done = subprocess.run(SPLIT_EVAL + [*map(str, gigpo), "--against", *map(str, grpo),
                           "--out", str(out)], capture_output=True, text=True, check=True)
    report = json.loads(out.read_text())
    expected = seed_difference([{t: [i % (4 + s) == 0] for i, t in enumerate(tasks)} for s in seeds],
                               [{t: [i % (2 + s) == 0] for i, t in enumerate(tasks)} for s in seeds])
    over_seeds = report["over_seeds"]
    assert over_seeds["difference"] == pytest.approx(expected.difference)  # the "0" evals play no part
    assert over_seeds["low"] == pytest.approx(expected.low) and over_seeds["high"] == pytest.approx(expected.high)
    assert over_seeds["per_seed"] == pytest.approx([10 / 40, 6 / 40, 3 / 40]) and over_seeds["seeds"] == 3
    assert over_seeds["direction"] == "within noise"  # three gains of +25, +15, +7.5: the seeds' spread is noise
    assert report["pooled"] is None and "pooled" not in done.stdout  # no task pooling across methods
    assert report["runs"][str(gigpo[0])]["before"] == pytest.approx(0.25)  # grpo0's last eval, paired with gigpo0


def test_against_needs_one_run_per_run_compared(tmp_path):
    run = run_with(tmp_path, "a", {"0": {"t": [True]}})
    done = subprocess.run(SPLIT_EVAL + [str(run), "--against", str(run), str(run)],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "one run per run compared" in done.stderr
