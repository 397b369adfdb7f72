"""A real λ sweep: `agentforge train ... --multirun algorithm.lambda=0,0.3` on the tiny model, then
`agentforge sweep-report` on its dir. The sweep is built once per session and reused by test_eval_command.py."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

AGENTFORGE = [sys.executable, "-m", "agentforge.cli"]
# The tiny model on the HF engine (vLLM's start-up is not the point here), local envs, one SFT step (so the
# weights surely move), 2 iterations with a checkpoint after each: iter_1's weights played iteration 2's rollout.
TINY_TRAIN = [
    "recipe=debug", "engine=hf", "env_pool.kind=local", "logger.wandb=false", "algorithm=tjpo",
    "algorithm.descriptor=spatial_coverage", "agent.max_turns=2", "agent.sampling.max_new_tokens=16",
]
TRAINER = [
    "trainer.iterations=2", "trainer.tasks_per_iteration=2", "trainer.group_size=2", "trainer.eval_tasks=2",
    "trainer.eval_group_size=2", "trainer.eval_every=2", "trainer.eval_before=false", "trainer.checkpoint_every=1",
    "trainer.keep_checkpoints=2", "trainer.warm_start=true", "sft.num_tasks=4", "sft.epochs=1", "sft.batch_size=4",
    "sft.lr=1e-2", "learner.lr=1e-2",
]


def run_cli(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    return subprocess.run([*AGENTFORGE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def tiny_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The λ sweep's multirun dir, trained on first use in this pytest run (about a minute of CPU): under xdist in the
    run's shared temp root, so the two files that read it share one sweep whichever workers they land on."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    sweep = root / "tiny_tjpo_sweep"
    with open(root / "tiny_tjpo_sweep.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second worker waits for the first one's sweep instead of training its own
        if (sweep / "DONE").exists():
            return sweep
        done = run_cli("train", *TINY_TRAIN, *TRAINER, "--multirun", "algorithm.lambda=0,0.3",
                       f"hydra.sweep.dir={sweep}", cwd=base)
        assert done.returncode == 0, done.stderr[-4000:]
        (sweep / "DONE").write_text("")
    return sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    return tiny_sweep(tmp_path_factory)


def test_sweep_report_tables_and_plots_a_real_lambda_sweep(sweep, tmp_path):
    done = run_cli("sweep-report", str(sweep), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "algorithm.lambda" in done.stderr and "finished" in done.stderr  # the printed table
    data = json.loads((sweep / "sweep_report.json").read_text())
    assert data["swept"] == ["algorithm.lambda"] and data["x"] == "algorithm.lambda"
    assert data["diversity_metric"] == "eval/div_pair/spatial_coverage"  # the descriptor the runs optimise
    jobs = data["jobs"]
    assert [j["swept"]["algorithm.lambda"] for j in jobs] == ["0", "0.3"]
    for job in jobs:
        summary = json.loads((Path(job["dir"]) / "summary.json").read_text())["after"]
        assert job["status"] == "finished" and job["eval_iteration"] == 2 == job["iterations"]
        assert job["metrics"]["eval/success_rate"] == summary["eval/success_rate"]
        assert job["metrics"]["eval/mean_return"] == summary["eval/mean_return"]
        assert "eval/div_groups/spatial_coverage" in job["metrics"]  # the trainer's eval diversity, gathered
    rows = [line for line in (sweep / "sweep_report.md").read_text().splitlines() if line.startswith("| tiny_")]
    assert len(rows) == 2 and "D^pair spatial_coverage" in (sweep / "sweep_report.md").read_text()
    assert (sweep / "sweep_report.png").stat().st_size > 10_000
    # the λ = 0.3 job against λ = 0, paired task by task on the final eval (2 tasks x 2 episodes: task bootstrap)
    done = run_cli("sweep-report", str(sweep), "--baseline", "algorithm.lambda=0", "--output", str(tmp_path / "vs"),
                   cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    versus = [j["versus_baseline"] for j in json.loads((tmp_path / "vs" / "sweep_report.json").read_text())["jobs"]]
    assert versus[0] == {"baseline_row": True}
    assert versus[1]["tasks"] == 2 and versus[1]["episodes"] == 4 and versus[1]["method"] == "paired task bootstrap"


def test_a_failed_job_beside_the_real_ones_is_reported_not_fatal(sweep, tmp_path):
    from agentforge.evaluation.sweep_report import sweep_report

    broken = tmp_path / "broken"
    (broken / ".hydra").mkdir(parents=True)
    (broken / ".hydra" / "overrides.yaml").write_text("- algorithm.lambda=0.5\n")
    (broken / "FAILED").write_text("ConfigError: something named the fix\n")
    report = sweep_report([str(sweep), str(broken)], output=str(tmp_path / "report"))
    assert [j.status for j in report.jobs] == ["finished", "finished", "failed"]
    assert report.rows()[2][1:3] == ["0.5", "failed"]
    assert (tmp_path / "report" / "sweep_report.png").exists()
