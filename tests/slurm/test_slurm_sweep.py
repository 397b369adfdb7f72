"""`--multirun hydra/launcher=submitit_slurm` on the real local Slurm: one Slurm job per swept value (TJPO's λ, StraTA's
κ), tiny model; `agentforge sweep-report` reads the finished jobs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.slurm.conftest import TINY_RUN, run

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="hydra-submitit-launcher is not installed "
                    "(pip install -e '.[slurm]')")

SUBMITIT = ["hydra/launcher=submitit_slurm", "hydra.launcher.partition=debug", "hydra.launcher.timeout_min=20",
            "hydra.launcher.cpus_per_task=1"]
ONE_ITERATION = [o for o in TINY_RUN if not o.startswith(("recipe=", "trainer.checkpoint_every"))] + [
    "model=tiny", "trainer.iterations=1", "trainer.eval_every=1", "trainer.eval_tasks=2", "trainer.checkpoint_every=0",
    "env_pool.kind=local", "trainer.warm_start=false"]  # the recipes' expert warm start needs longer episodes


def sweep(slurm: dict[str, str], sweep_dir: Path, *overrides: str) -> list[dict]:
    out = run([sys.executable, "-m", "agentforge.cli", "train", "--multirun", *SUBMITIT, *ONE_ITERATION, *overrides,
               f"hydra.sweep.dir={sweep_dir}"], slurm, timeout=1200)
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit())
    assert len(jobs) == 2, (sorted(sweep_dir.iterdir()), out.stdout[-2000:], out.stderr[-3000:])
    slurm_logs = list((sweep_dir / ".submitit").rglob("*_log.out"))
    assert len({p.parent.name for p in slurm_logs}) == 2, slurm_logs  # two Slurm jobs, one per value
    report = run([sys.executable, "-m", "agentforge.cli", "sweep-report", str(sweep_dir)], slurm)
    assert "sweep: 2 jobs" in report.stderr, report.stderr
    return json.loads((sweep_dir / "sweep_report.json").read_text())["jobs"]


def test_lambda_sweep_runs_one_slurm_job_per_value(slurm: dict[str, str], tmp_path: Path) -> None:
    jobs = sweep(slurm, tmp_path / "lambda", "recipe=tjpo_alfworld", "algorithm.lambda=0,0.3")
    assert sorted(j["swept"]["algorithm.lambda"] for j in jobs) == ["0", "0.3"]
    assert all(j["status"] == "finished" for j in jobs), jobs


def test_kappa_sweep_for_strata(slurm: dict[str, str], tmp_path: Path) -> None:
    jobs = sweep(slurm, tmp_path / "kappa", "recipe=strata_sokoban", "algorithm.kappa=0.01,1.0",
                 "trainer.group_size=4")  # StraTA's 2 strategies x 2 rollouts
    assert sorted(j["swept"]["algorithm.kappa"] for j in jobs) == ["0.01", "1.0"]
    assert all(j["status"] == "finished" for j in jobs), jobs
