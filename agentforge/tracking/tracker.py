"""Run tracking: metrics.jsonl always, wandb (offline unless set online) and TensorBoard when asked."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from agentforge.errors import require
from agentforge.tracking.redact import redact
from agentforge.tracking.trajectories import (
    TABLE_COLUMNS,
    iteration_files,
    table_rows,
    trajectory_file,
    write_records,
)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class RunTracker:
    """Fan one metrics dict out to every configured sink. Keys are `section/name` (train/..., eval/...)."""

    def __init__(self, run_dir: Path, logger_cfg: dict[str, Any], config: dict[str, Any], resume: bool) -> None:
        self.run_dir = run_dir
        self.metrics_path = run_dir / "metrics.jsonl"
        self.samples_path = run_dir / "samples.jsonl"
        self._wandb = None
        self._tb = None
        if logger_cfg.get("wandb"):
            require("wandb", "pip install wandb")
            import wandb

            os.environ.setdefault("WANDB_SILENT", "true")
            self._wandb = wandb.init(
                project=logger_cfg.get("project", "agentforge"),
                dir=str(run_dir),
                mode=logger_cfg.get("wandb_mode", "offline"),
                config=redact(config),  # the run's config without its secrets (tracking/redact.py)
                name=logger_cfg.get("run_name") or run_dir.name,
                resume="allow" if resume else None,
                id=logger_cfg.get("run_id") or _stable_run_id(run_dir),
            )
        if logger_cfg.get("tensorboard"):
            require("tensorboard", "pip install tensorboard")
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        with self.metrics_path.open("a") as f:
            f.write(json.dumps({"iteration": step, **{k: _finite(v) for k, v in metrics.items()}}) + "\n")
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float):
                    self._tb.add_scalar(key, value, step)

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        with self.samples_path.open("a") as f:
            for sample in samples:
                f.write(json.dumps({"iteration": step, **sample}) + "\n")

    def log_trajectories(self, step: int, records: list[dict[str, Any]]) -> Path:
        """An iteration's whole trajectories (`tracking.trajectories.trajectory_records`): a gzipped JSONL file per
        iteration for `agentforge view`, and a wandb table (one row per turn) when wandb is on."""
        path = write_records(trajectory_file(self.run_dir, step), ({"iteration": step, **r} for r in records))
        if self._wandb is not None:
            import wandb

            table = wandb.Table(columns=TABLE_COLUMNS, data=table_rows(step, records))
            self._wandb.log({"trajectories": table}, step=step)
        return path

    def truncate_after(self, step: int) -> None:
        """On resume, drop lines logged after the checkpoint so the metrics file has no duplicate iterations (and
        the trajectory files of those iterations: the resumed run writes them again)."""
        for path in (self.metrics_path, self.samples_path):
            if path.exists():
                kept = [line for line in path.read_text().splitlines() if json.loads(line)["iteration"] <= step]
                path.write_text("".join(line + "\n" for line in kept))
        for iteration, path in iteration_files(self.run_dir).items():
            if iteration > step:
                path.unlink()

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()
        if self._tb is not None:
            self._tb.close()


def _stable_run_id(run_dir: Path) -> str:
    import hashlib

    return hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:12]


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl (none when it is missing); a line cut by a killed run is skipped."""
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows
