"""scripts/compare_methods.py: methods paired seed by seed and task by task at one eval, with the random floor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentforge.stats import paired_difference

pytestmark = pytest.mark.unit
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compare_methods.py"
TASKS = [f"sokoban:eval:{1_000_000 + i}" for i in range(8)]  # Task.key of the held-out tasks


def run(tmp_path: Path, name: str, seed: int, evals: dict[str, list[bool]], stopped: bool = False) -> Path:
    """A run folder as the trainer leaves it: config, metrics with eval rows, summary (or, stopped early, only a
    checkpoint's trainer state)."""
    folder = tmp_path / name
    (folder / "checkpoints" / "iter_000020").mkdir(parents=True)
    config = {"seed": seed, "env": {"name": "sokoban", "dim_room": [6, 6], "num_boxes": 1, "max_steps": 6,
                                    "num_gen_steps": 5},
              "agent": {"max_turns": 6}, "trainer": {"eval_tasks": len(TASKS), "eval_group_size": 1}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    outcomes = {key: dict(zip(TASKS, ([o] for o in values), strict=True)) for key, values in evals.items()}
    rows = [{"iteration": int(k), "eval/success_rate": sum(v) / len(v), "eval/episodes": len(v),
             "time/train_elapsed": 60.0 * (1 + int(k))} for k, v in evals.items() if k.isdigit()]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    state = {"eval_outcomes": outcomes}
    if stopped:
        (folder / "checkpoints" / "iter_000020" / "trainer_state.json").write_text(json.dumps(state))
    else:
        (folder / "summary.json").write_text(json.dumps(state))
    return folder


def test_methods_are_paired_by_seed_and_task_at_the_eval_asked(tmp_path):
    no, yes = [False] * 8, [True] * 8
    a = [run(tmp_path, "a0", 0, {"base": no, "0": no, "10": yes, "20": [True] * 6 + [False] * 2}),
         run(tmp_path, "a1", 1, {"base": no, "0": no, "10": yes, "20": yes, "30": no}, stopped=True)]
    b = [run(tmp_path, "b0", 0, {"base": no, "0": no, "10": no, "20": [False] * 6 + [True] * 2}),
         run(tmp_path, "b1", 1, {"base": no, "0": no, "10": no, "20": no})]
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--method", "gigpo", *map(str, a), "--method", "grpo",
                           *map(str, b), "--out", str(out), "--plot", str(tmp_path / "curves.png")],
                          capture_output=True, text=True, check=True)
    report = json.loads(out.read_text())
    assert report["at"] == "20"  # the last eval every run has (a1 also has 30)
    between = report["between"]["grpo -> gigpo"]
    expected = paired_difference({t: [i >= 6, False] for i, t in enumerate(TASKS)},
                                 {t: [i < 6, True] for i, t in enumerate(TASKS)})
    assert between["difference"] == pytest.approx(expected.difference) == pytest.approx(14 / 16 - 2 / 16)
    assert between["low"] == pytest.approx(expected.low)
    verdicts = report["methods"]["gigpo"]["verdicts"]
    assert verdicts["warm start -> 20"]["after"] == pytest.approx(14 / 16)
    assert "random floor -> 20" in verdicts  # played on the runs' own rooms, seeds and turn budget
    assert (tmp_path / "curves.png").stat().st_size > 0 and "| gigpo | 1 |" in done.stdout


def test_a_baseline_is_compared_with_each_method_and_gains_are_given_per_training_hour(tmp_path):
    no, yes, half = [False] * 8, [True] * 8, [True] * 4 + [False] * 4
    recipe = [run(tmp_path, "r0", 0, {"0": no, "20": half}), run(tmp_path, "r1", 1, {"0": no, "20": half})]
    better = [run(tmp_path, "x0", 0, {"0": no, "20": yes}), run(tmp_path, "x1", 1, {"0": no, "20": yes})]
    worse = [run(tmp_path, "y0", 0, {"0": no, "20": no}), run(tmp_path, "y1", 1, {"0": no, "20": no})]
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--method", "recipe", *map(str, recipe), "--method", "better",
                           *map(str, better), "--method", "worse", *map(str, worse), "--baseline", "recipe",
                           "--out", str(out)], capture_output=True, text=True, check=True)
    report = json.loads(out.read_text())
    assert set(report["between"]) == {"recipe -> better", "recipe -> worse"}  # no better-vs-worse pair
    assert report["between"]["recipe -> better"]["difference"] == pytest.approx(0.5)  # the method minus the baseline
    assert report["between"]["recipe -> worse"]["difference"] == pytest.approx(-0.5)
    hours = 21 / 60  # time/train_elapsed at iteration 20: 60 s x 21
    assert report["per_hour"]["better"]["points_per_hour"][0] == pytest.approx(100 / hours)
    assert report["per_hour"]["recipe"]["points_per_hour"][0] == pytest.approx(50 / hours)
    assert report["per_hour"]["recipe"]["versus_baseline"] is None
    assert "| worse | 0.0% → 0.0% / 0.0% → 0.0% |" in done.stdout
    refused = subprocess.run([sys.executable, str(SCRIPT), "--method", "recipe", *map(str, recipe),
                              "--baseline", "grpo"], capture_output=True, text=True)
    assert refused.returncode != 0 and "--baseline grpo: no such method; the methods are recipe" in refused.stderr
