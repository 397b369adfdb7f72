"""scripts/compare_methods.py: methods compared over training seeds (run i with run i) at one eval, each method's
gains pooled over its seeds and seed by seed, with the random floor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentforge.stats import SEED_METHOD, seed_difference

pytestmark = pytest.mark.unit
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compare_methods.py"
TASKS = [f"sokoban:test:{2_000_000 + i}" for i in range(8)]  # Task.key of the held-out test tasks


def run(tmp_path: Path, name: str, seed: int, evals: dict[str, list[bool]], stopped: bool = False) -> Path:
    """A run folder as the trainer leaves it: config, metrics with test-split eval rows, summary with the test
    split's outcomes and random floor (or, stopped early, only a checkpoint's trainer state)."""
    folder = tmp_path / name
    (folder / "checkpoints" / "iter_000020").mkdir(parents=True)
    config = {"seed": seed, "env": {"name": "sokoban", "dim_room": [6, 6], "num_boxes": 1, "max_steps": 6,
                                    "num_gen_steps": 5},
              "agent": {"max_turns": 6}, "trainer": {"test_tasks": len(TASKS), "eval_group_size": 1}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    outcomes = {key: dict(zip(TASKS, ([o] for o in values), strict=True)) for key, values in evals.items()}
    rows = [{"iteration": int(k), "test/success_rate": sum(v) / len(v), "test/episodes": len(v),
             "time/train_elapsed": 60.0 * (1 + int(k))} for k, v in evals.items() if k.isdigit()]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    floor = {task: [i % 2 == 0] for i, task in enumerate(TASKS)}
    if stopped:
        state = {"test_outcomes": outcomes}
        (folder / "checkpoints" / "iter_000020" / "trainer_state.json").write_text(json.dumps(state))
    else:
        (folder / "summary.json").write_text(json.dumps({"test": {"outcomes": outcomes, "floor_outcomes": floor}}))
    return folder


def test_methods_are_compared_over_training_seeds_at_the_eval_asked(tmp_path):
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
    expected = seed_difference([dict(zip(TASKS, ([i >= 6] for i in range(8)), strict=True)),
                                dict.fromkeys(TASKS, [False])],
                               [dict(zip(TASKS, ([i < 6] for i in range(8)), strict=True)),
                                dict.fromkeys(TASKS, [True])])
    assert between["per_seed"] == [0.5, 1.0] and between["difference"] == pytest.approx(expected.difference) == 0.75
    assert between["low"] == pytest.approx(expected.low) and between["seeds"] == 2
    assert not between["beyond_noise"] and between["direction"] == "no verdict (2 seeds; need ≥ 3)"
    assert "| gigpo vs grpo (2 seeds) |" in done.stdout and SEED_METHOD in done.stdout
    verdicts = report["methods"]["gigpo"]["verdicts"]  # pooled over the seeds, task by task
    assert verdicts["warm start -> 20"]["after"] == pytest.approx(14 / 16)
    per_seed = report["methods"]["gigpo"]["verdicts_per_seed"]["warm start -> 20"]
    assert [v["difference"] for v in per_seed] == [0.75, 1.0]
    assert "random floor -> 20" not in verdicts  # run a1 stopped before its summary: no floor recorded for it
    assert (tmp_path / "curves.png").stat().st_size > 0 and "| gigpo | 1 |" in done.stdout


def test_a_baseline_is_compared_with_each_method_and_gains_are_given_per_training_hour(tmp_path):
    no, yes, half = [False] * 8, [True] * 8, [True] * 4 + [False] * 4
    recipe = [run(tmp_path, f"r{s}", s, {"0": no, "20": half}) for s in range(3)]
    better = [run(tmp_path, f"x{s}", s, {"0": no, "20": yes}) for s in range(3)]
    worse = [run(tmp_path, f"y{s}", s, {"0": no, "20": no}) for s in range(3)]
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--method", "recipe", *map(str, recipe), "--method", "better",
                           *map(str, better), "--method", "worse", *map(str, worse), "--baseline", "recipe",
                           "--out", str(out)], capture_output=True, text=True, check=True)
    report = json.loads(out.read_text())
    assert set(report["between"]) == {"recipe -> better", "recipe -> worse"}  # no better-vs-worse pair
    better_than, worse_than = report["between"]["recipe -> better"], report["between"]["recipe -> worse"]
    assert better_than["difference"] == pytest.approx(0.5)  # the method minus the baseline, over 3 training seeds
    assert better_than["direction"] == "better beyond noise" and better_than["seeds"] == 3
    assert worse_than["difference"] == pytest.approx(-0.5) and worse_than["direction"] == "worse beyond noise"
    assert report["per_hour"]["better"]["versus_baseline"] == better_than
    hours = 21 / 60  # time/train_elapsed at iteration 20: 60 s x 21
    assert report["per_hour"]["better"]["points_per_hour"][0] == pytest.approx(100 / hours)
    assert report["per_hour"]["recipe"]["points_per_hour"][0] == pytest.approx(50 / hours)
    assert report["per_hour"]["recipe"]["versus_baseline"] is None
    assert report["split"] == "test" and "random floor -> 20" in report["methods"]["recipe"]["verdicts"]
    assert "| worse (3 seeds) | 0.0% → 0.0% / 0.0% → 0.0% / 0.0% → 0.0% |" in done.stdout
    assert "+50.0 [" in done.stdout and "], better beyond noise |" in done.stdout  # the vs-baseline cell
    refused = subprocess.run([sys.executable, str(SCRIPT), "--method", "recipe", *map(str, recipe),
                              "--baseline", "grpo"], capture_output=True, text=True)
    assert refused.returncode != 0 and "--baseline grpo: no such method; the methods are recipe" in refused.stderr
