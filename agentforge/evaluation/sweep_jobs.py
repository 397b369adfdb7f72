"""The jobs of a Hydra sweep as `agentforge sweep-report` reads them: each job's run dir, its swept overrides, its
status (done, running, failed: the CLI's FAILED marker, or no change for STALE_SECONDS), its final or latest eval and
its training metrics' means (sweep_report.py makes the table and plot from them)."""

from __future__ import annotations

import glob
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentforge.errors import AgentforgeError
from agentforge.tracking.tracker import read_metrics

FAILED_MARKER = "FAILED"  # written into a job's run dir by the CLI when the job raised
STALE_SECONDS = 1800  # a job without summary whose files have not changed for this long is reported as failed
# training metrics the table reports as their mean over the run's iterations (up to the reported eval): T2PO's
# regeneration rate, StraTA's self-judgment and strategy diversity (what a κ or σ sweep changes)
TRAIN_KEYS = ("train/regeneration_rate", "train/strata/judgment_flag_rate",
              "train/strata/judgment_parse_failure_rate", "train/strata/strategy_cosine_chosen",
              "train/strata/strategy_cosine_candidates")


@dataclass
class Job:
    """One run dir of a sweep: its overrides, status and final (or latest) eval metrics."""

    path: Path
    overrides: dict[str, str]
    status: str
    iteration: int | None = None
    iterations: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    outcomes: dict[str, list[bool]] | None = None  # the final eval's per-task outcomes (paired comparisons)
    floor: float | None = None  # the random floor's success on the same tasks
    versus: dict[str, Any] | None = None  # the paired difference against the baseline job

    @property
    def seed(self) -> Any:
        return self.overrides.get("seed", self.config.get("seed"))

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"

    def to_json(self, swept: list[str]) -> dict[str, Any]:
        return {"dir": str(self.path), "status": self.status, "note": self.note or None,
                "overrides": self.overrides, "swept": {k: self.overrides.get(k) for k in swept},
                "eval_iteration": self.iteration, "iterations": self.iterations,
                "metrics": {k: (v if math.isfinite(v) else None) for k, v in self.metrics.items()},
                "versus_baseline": self.versus, "random_floor": self.floor}


# ---- gathering -------------------------------------------------------------------------------------------------
def is_job_dir(path: Path) -> bool:
    return (path / ".hydra" / "overrides.yaml").is_file()


def find_job_dirs(targets: list[str]) -> list[Path]:
    """Job dirs named by `targets`: multirun dirs (their job subfolders), job dirs themselves, or globs of either."""
    jobs: list[Path] = []
    for target in targets:
        matches = sorted(glob.glob(str(Path(target).expanduser()))) or [target]
        for match in map(Path, matches):
            if not match.is_dir():
                raise AgentforgeError(f"sweep-report: {match} is not a directory; give a multirun dir (e.g. "
                                      "multirun/train/<time>), a job dir in it, or a glob of them")
            if is_job_dir(match):
                jobs.append(match)
                continue
            found = sorted((p for p in match.iterdir() if p.is_dir() and is_job_dir(p)), key=_job_order)
            if not found:
                raise AgentforgeError(
                    f"sweep-report: no Hydra jobs under {match} (expected <dir>/<job number>/.hydra/overrides.yaml, as "
                    "`agentforge train ... --multirun key=a,b` writes under multirun/train/<time>/)")
            jobs.extend(found)
    unique: dict[Path, None] = dict.fromkeys(p.resolve() for p in jobs)
    return list(unique)


def _job_order(path: Path) -> tuple[int, str]:
    return (int(path.name), "") if path.name.isdigit() else (1 << 30, path.name)


def parse_overrides(lines: list[Any]) -> dict[str, str]:
    """Hydra override strings (`algorithm.lambda=0.3`, `+x=1`, `~y`) as key → value text."""
    out: dict[str, str] = {}
    for line in lines or []:
        text = str(line)
        key, sep, value = text.partition("=")
        key = key.lstrip("+~")
        out[key] = value if sep else "(deleted)"
    return out


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None




def _numeric(values: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            continue
        try:
            out[key] = float(value)  # NaN/inf were logged as strings
        except ValueError:
            continue
    return out


def read_job(path: Path, now: float | None = None) -> Job:
    """Status and final eval of one job; never raises for a broken or unfinished run."""
    overrides = parse_overrides(yaml.safe_load((path / ".hydra" / "overrides.yaml").read_text()) or [])
    config: dict[str, Any] = {}
    for candidate in (path / "config.yaml", path / ".hydra" / "config.yaml"):
        try:
            config = yaml.safe_load(candidate.read_text()) or {}
            break
        except (OSError, yaml.YAMLError):
            continue
    iterations = (config.get("trainer") or {}).get("iterations") if isinstance(config, dict) else None
    job = Job(path=path, overrides=overrides, status="running", config=config if isinstance(config, dict) else {},
              iterations=int(iterations) if isinstance(iterations, int) else None)
    all_rows = read_metrics(path / "metrics.jsonl")
    rows = [r for r in all_rows if "eval/success_rate" in r]
    train = train_means(all_rows, int(rows[-1].get("iteration", 0)) if rows else None)
    if rows:
        job.iteration = int(rows[-1].get("iteration", 0))
        job.metrics = {k: v for k, v in _numeric(rows[-1]).items() if k.startswith("eval/")} | train
    summary = _read_json(path / "summary.json")
    if summary is not None:
        job.status = "finished"
        after = summary.get("after")
        if isinstance(after, dict):
            job.iteration = int(after.get("iteration", job.iteration or 0))
            job.metrics = {k: v for k, v in _numeric(after).items() if k.startswith("eval/")} | train
        outcomes = summary.get("eval_outcomes") or {}
        if job.iteration is not None and isinstance(outcomes.get(str(job.iteration)), dict):
            job.outcomes = outcomes[str(job.iteration)]
        for row in summary.get("evals") or []:
            if isinstance(row, dict) and row.get("name") == "random floor":
                job.floor = float(row["success"])
        if not job.metrics:
            job.note = "no eval logged (trainer.eval_every=0?)"
        return job
    failed = path / FAILED_MARKER
    if failed.exists():
        job.status = "failed"
        job.note = failed.read_text().strip().splitlines()[0][:200] if failed.read_text().strip() else ""
        return job
    idle = (now or time.time()) - _last_change(path)
    if idle > STALE_SECONDS:
        job.status = "failed"
        job.note = f"no summary and no activity for {idle / 60:.0f} min (killed or crashed)"
    return job


def train_means(rows: list[dict[str, Any]], up_to: int | None) -> dict[str, float]:
    """Each of TRAIN_KEYS as its mean over the logged iterations up to `up_to` (the reported eval); none without one."""
    if up_to is None:
        return {}
    values: dict[str, list[float]] = {}
    for row in rows:
        if int(row.get("iteration", 0)) > up_to:
            continue
        for key, value in _numeric(row).items():
            if key in TRAIN_KEYS and math.isfinite(value):
                values.setdefault(key, []).append(value)
    return {key: sum(v) / len(v) for key, v in values.items()}


def _last_change(path: Path) -> float:
    times = [path.stat().st_mtime]
    for child in path.iterdir():
        try:
            times.append(child.stat().st_mtime)
        except OSError:
            continue
    return max(times)


# ---- the table -------------------------------------------------------------------------------------------------
