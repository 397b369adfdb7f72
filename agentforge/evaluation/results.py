"""Committed results: the per-task outcomes behind every claim, compact, with how they were made.

Why: a table in the docs is only believable if it can be re-derived. Runs live in gitignored `runs/` on one machine;
`export_result` keeps what a claim needs in `docs/results/<name>.json`: the command, the commit, the CPU kind and
dtype, the wall time, the held-out record (sizes, what training skipped, the overlap measured), and each eval's
outcome per task, on the test split (the claim) and the eval split (choosing). `scripts/results_tables.py` rebuilds
every results table of README.md and docs/ from these files, and a test fails where a number there differs.

Outcomes are stored as one string per eval, one character per episode ('1' won, '0' lost), tasks in the order of
`tasks`, `episodes` characters each.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentforge.evaluation.run_outcomes import Outcomes, run_floor, run_outcomes

RESULTS_DIR = Path(__file__).resolve().parents[2] / "docs" / "results"
PHASES = ("time/warm_start", "time/rollout", "time/update", "time/sync", "time/eval", "time/base_eval", "time/test",
          "time/test_base")


def encode(outcomes: Outcomes, tasks: list[str]) -> str:
    return "".join("".join("1" if won else "0" for won in outcomes[task]) for task in tasks)


def decode(text: str, tasks: list[str], episodes: int) -> Outcomes:
    if len(text) != len(tasks) * episodes:
        raise ValueError(f"{len(text)} outcomes for {len(tasks)} tasks x {episodes} episodes")
    return {task: [c == "1" for c in text[i * episodes:(i + 1) * episodes]] for i, task in enumerate(tasks)}


def _split_block(run: Path, split: str) -> dict[str, Any] | None:
    try:
        evals = run_outcomes(run, split)
    except SystemExit:
        return None
    tasks = sorted(next(iter(evals.values())))
    episodes = len(next(iter(evals.values()))[tasks[0]])
    block = {"tasks": tasks, "episodes": episodes, "evals": {k: encode(v, tasks) for k, v in evals.items()}}
    floor = run_floor(run, split)
    if floor:
        block["floor_episodes"] = len(floor[tasks[0]])
        block["floor"] = encode(floor, tasks)
    return block


def _git(*args: str) -> str:
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()


def phase_seconds(run: Path) -> dict[str, float]:
    """Each phase's seconds summed over the run's metrics (warm start, rollout, update, sync, evals); a phase the
    run never logged is left out rather than shown as 0 s."""
    totals: dict[str, float] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key in PHASES:
            if isinstance(row.get(key), int | float):
                totals[key] = totals.get(key, 0.0) + float(row[key])
    return {k: round(totals[k], 1) for k in PHASES if k in totals}


def training_minutes(run: Path) -> dict[str, float]:
    """Training minutes (warm start, rollout, update, sync; evals not counted) at each iteration logged."""
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if isinstance(row.get("time/train_elapsed"), int | float):
            out[str(row["iteration"])] = round(float(row["time/train_elapsed"]) / 60, 2)
    return out


def code_state() -> tuple[str, bool]:
    """The commit checked out and whether the code (agentforge/, recipes/, conf/) differs from it: taken when a run
    starts, so a result names the code that made it."""
    return _git("rev-parse", "HEAD"), bool(_git("status", "--porcelain", "agentforge", "recipes", "conf"))


def export_result(run: Path, name: str, command: str, wall_seconds: float, note: str = "",
                  folder: Path = RESULTS_DIR, code: tuple[str, bool] | None = None) -> Path:
    """Write `docs/results/<name>.json` from a finished run dir (see the module docstring); `code`: the commit and
    whether the code had uncommitted changes when the run started (default: now)."""
    from omegaconf import OmegaConf

    from agentforge.hardware import describe

    run = Path(run)
    cfg = OmegaConf.to_container(OmegaConf.load(run / "config.yaml"), resolve=True)
    summary = json.loads((run / "summary.json").read_text())
    hardware = describe()
    commit, dirty = code or code_state()
    record = {
        "name": name, "command": command, "note": note,
        "commit": commit, "uncommitted_changes": dirty,
        "machine": {k: hardware[k] for k in ("cpu_model", "cpu_kind", "torch_cpu_capability", "cores", "torch")},
        "dtype": (cfg.get("hardware") or {}).get("dtype") or cfg["model"].get("dtype"),
        "wall_seconds": round(float(wall_seconds), 1), "phase_seconds": phase_seconds(run),
        "training_minutes": training_minutes(run),
        "seed": cfg["seed"], "algorithm": cfg["algorithm"]["name"], "env": cfg["env"],
        "trainer": {k: cfg["trainer"][k] for k in ("iterations", "tasks_per_iteration", "group_size", "eval_tasks",
                                                   "test_tasks", "eval_group_size", "eval_temperature")},
        "held_out": summary.get("held_out"),
        "splits": {split: block for split in ("test", "eval") if (block := _split_block(run, split))},
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name.replace('/', '__')}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


@dataclass(frozen=True)
class Result:
    """One committed run: its record and its outcomes, decoded on demand."""

    record: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.record["name"])

    def evals(self, split: str = "test") -> list[str]:
        return list(self.record["splits"].get(split, {}).get("evals", {}))

    def outcomes(self, key: str, split: str = "test") -> Outcomes:
        block = self.record["splits"][split]
        if key == "last":
            key = max((k for k in block["evals"] if k.isdigit()), key=int)
        return decode(block["evals"][key], block["tasks"], int(block["episodes"]))

    def floor(self, split: str = "test") -> Outcomes | None:
        block = self.record["splits"][split]
        if "floor" not in block:
            return None
        return decode(block["floor"], block["tasks"], int(block["floor_episodes"]))

    def rate(self, key: str, split: str = "test") -> float:
        flat = [won for values in self.outcomes(key, split).values() for won in values]
        return sum(flat) / len(flat)


def load_results(folder: Path = RESULTS_DIR) -> dict[str, Result]:
    return {(r := Result(json.loads(p.read_text()))).name: r for p in sorted(folder.glob("*.json"))}
