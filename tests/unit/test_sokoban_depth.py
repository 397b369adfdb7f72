"""scripts/sokoban_depth.py: held-out rooms split by the BFS solver's shortest solution, success per bucket."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentforge.envs.sokoban import SokobanEnv
from agentforge.envs.sokoban_solver import solve
from agentforge.types import Task

pytestmark = pytest.mark.unit
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sokoban_depth.py"
SPLIT_EVAL = [sys.executable, str(SCRIPT), "--split", "eval"]  # these fixtures write eval-split outcomes
ENV = {"name": "sokoban", "dim_room": [6, 6], "num_boxes": 1, "max_steps": 6, "num_gen_steps": 5}
SEEDS = [1_000_000 + i for i in range(12)]


def test_rooms_are_bucketed_by_their_shortest_solution_and_paired_per_bucket(tmp_path: Path) -> None:
    env = SokobanEnv(**{k: v for k, v in ENV.items() if k != "name"})
    lengths = {}
    for seed in SEEDS:
        env.reset(Task("sokoban", seed, "eval"))
        lengths[f"sokoban:eval:{seed}"] = len(solve(env))
    one_move = [k for k, n in lengths.items() if n == 1]
    assert one_move and len(one_move) < len(SEEDS)  # both kinds among these seeds
    # before: nothing solved; after: exactly the one-move rooms
    evals = {"0": {k: [False] for k in lengths}, "20": {k: [k in one_move] for k in lengths}}
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"env": ENV}))
    (run / "summary.json").write_text(json.dumps({"eval_outcomes": evals}))
    out = tmp_path / "depth.json"
    printed = subprocess.run(SPLIT_EVAL + [str(run), "--out", str(out)], capture_output=True,
                             text=True, check=True).stdout
    report = json.loads(out.read_text())
    assert report["evals"] == ["0", "20"]
    assert report["buckets"]["1 move"]["rooms"] == len(one_move)
    assert report["buckets"]["1 move"]["success"] == {"0": 0.0, "20": 1.0}
    assert sum(b["rooms"] for b in report["buckets"].values()) == len(SEEDS)
    assert all(b["success"]["20"] == 0.0 for name, b in report["buckets"].items() if name != "1 move")
    assert "| 1 move |" in printed
