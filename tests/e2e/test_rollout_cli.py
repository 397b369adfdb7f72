"""The user's view: `agentforge rollout` through the console script, SmolLM2 on vLLM with Ray env workers."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

AGENTFORGE = [sys.executable, "-m", "agentforge.cli"]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*AGENTFORGE, *args], cwd=cwd, capture_output=True, text=True, timeout=900)


def test_smollm2_plays_sokoban_through_vllm_and_ray(tmp_path):
    run_dir = tmp_path / "run"
    done = run_cli("rollout", "recipe=grpo_sokoban", "rollout.num_tasks=2", "rollout.group_size=2",
                   "agent.max_turns=3", "agent.sampling.max_new_tokens=48", "rollout.save_tokens=true",
                   f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["episodes"] == 4
    for key in ("success_rate", "mean_return", "mean_turns", "invalid_action_rate", "generated_tokens_per_s",
                "env_steps_per_s"):
        assert key in summary
    assert summary["generated_tokens"] > 0 and summary["generated_tokens_per_s"] > 0
    lines = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and {line["task"]["seed"] for line in lines} == {1_000_000, 1_000_001}
    for line in lines:
        assert 1 <= line["length"] <= 3
        for turn in line["turns"]:
            assert len(turn["response_ids"]) == len(turn["logprobs"]) > 0 and turn["prompt_ids"]
    assert "rollout summary" in done.stderr + done.stdout


def test_cli_errors_name_the_valid_choices(tmp_path):
    done = run_cli("rollout", "recipe=nope", cwd=tmp_path)
    assert done.returncode != 0 and "grpo_sokoban" in done.stderr
    done = run_cli("fly", cwd=tmp_path)
    assert done.returncode == 2 and "valid commands" in done.stderr
    done = run_cli("rollout", "model=nope", cwd=tmp_path)
    assert done.returncode != 0 and "smollm2-135m" in done.stderr
    done = run_cli("rollout", "recipe=debug", "env=nope", cwd=tmp_path)
    assert done.returncode != 0 and "sokoban" in done.stderr
    listed = run_cli("envs", "list", cwd=tmp_path)
    assert listed.returncode == 0 and "sokoban" in listed.stdout.split()


def test_train_sweep_runs_each_job_in_its_own_folder(tmp_path):
    sweep = tmp_path / "sweep"
    done = run_cli("train", "recipe=debug", "--multirun", "algorithm=grpo,gigpo", "trainer.iterations=1",
                   "trainer.tasks_per_iteration=2", "trainer.group_size=2", "trainer.eval_tasks=1",
                   "trainer.eval_every=0", "trainer.eval_before=false", "logger.wandb=false", "env_pool.kind=local",
                   "agent.max_turns=1", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert [p.name for p in runs] == ["0", "1"]
    for run, algorithm in zip(runs, ["grpo", "gigpo"], strict=True):
        assert f"name: {algorithm}" in (run / "config.yaml").read_text()
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert rows[-1]["iteration"] == 1 and "train/loss" in rows[-1]
        assert (run / "training_curves.png").exists()
