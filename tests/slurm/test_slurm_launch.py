"""`agentforge launch slurm` on a real Slurm (two emulated nodes on this machine): a Ray cluster over both nodes, the
tiny model trained with two learner ranks on different nodes and env workers on both; bad input refused before or
by sbatch with the fix; a node that never joins ends the job within the timeout, torn down."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil

from tests.slurm.conftest import (
    TINY_RUN,
    complete_checkpoints,
    metric_steps,
    run,
    wait_for_end,
    wait_until,
)

AGENTFORGE = [sys.executable, "-m", "agentforge.cli"]


def launch(env: dict[str, str], run_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run([*AGENTFORGE, "launch", "slurm", f"run_dir={run_dir}", *args], env, timeout=180, check=check)


def job_id(run_dir: Path) -> str:
    return (run_dir / "slurm_job_id").read_text().strip()


def ray_processes_of(job: str) -> list[psutil.Process]:
    """Ray daemons of this job (their temp dir names the job): none may survive it."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if f"af-ray-{job}-" in cmdline:
            found.append(proc)
    return found


def test_two_node_run_places_work_on_both_nodes(slurm: dict[str, str], tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = launch(slurm, run_dir, "nodes=2", "cpus_per_node=2", "time=20:00", "signal_seconds=60", "ray_port=23100",
                 "join_timeout=120", *TINY_RUN, "trainer.iterations=2", "learner.num_ranks=2",
                 "learner.placement_strategy=STRICT_SPREAD", "env_pool.num_workers=4")
    job = job_id(run_dir)
    assert f"submitted Slurm job {job}" in out.stdout
    log = run_dir / f"slurm-{job}.out"
    state = wait_for_end(job, slurm, timeout=900, log=log)
    text = log.read_text()
    assert state == "COMPLETED", text[-4000:]
    assert "Ray cluster ready: 2 node(s) (n1, n2)" in text
    assert "trainer exited with status 0" in text and "Ray cluster torn down" in text
    assert metric_steps(run_dir) == [1, 2]
    assert complete_checkpoints(run_dir) == [1, 2]
    assert (run_dir / "job.sbatch").read_text().startswith("#!/bin/bash")
    placement = json.loads((run_dir / "placement.json").read_text())
    per_node = placement["actors_per_node"]
    assert set(per_node["DeepSpeedLearnerRank"]) == {"n1", "n2"}, per_node  # one rank on each node
    assert set(per_node["EnvHost"]) == {"n1", "n2"}, per_node  # env workers on both nodes
    assert {n["node"] for n in placement["nodes"]} == {"n1", "n2"}
    assert not ray_processes_of(job), "Ray processes outlived the job"
    assert not (run_dir / ".ray" / "auth_token").exists()  # the job's token is removed with its cluster


def test_engine_replicas_on_both_nodes_take_weights_from_learner_rank_zero(slurm: dict[str, str],
                                                                         tmp_path: Path) -> None:
    """`engine.replicas=2` over two nodes: one replica per node (STRICT_SPREAD), two learner ranks in Ray actors, so
    every push goes from learner rank 0 to both replicas over the gloo weight group, across the nodes. Colocated:
    each emulated node has 2 CPU slots, a learner rank takes one and the env workers a hundredth, so a replica taking
    a whole one would not leave room for the rank."""
    run_dir = tmp_path / "run"
    launch(slurm, run_dir, "nodes=2", "cpus_per_node=2", "time=20:00", "signal_seconds=60", "ray_port=23300",
           "join_timeout=120", *TINY_RUN, "trainer.iterations=2", "engine=hf", "engine.replicas=2",
           "engine.colocate=true", "engine.placement_strategy=STRICT_SPREAD", "learner.num_ranks=2",
           "learner.placement_strategy=STRICT_SPREAD", "env_pool.num_workers=2")
    job = job_id(run_dir)
    log = run_dir / f"slurm-{job}.out"
    state = wait_for_end(job, slurm, timeout=900, log=log)
    assert state == "COMPLETED", log.read_text()[-4000:]
    per_node = json.loads((run_dir / "placement.json").read_text())["actors_per_node"]
    assert per_node["EngineReplica"] == {"n1": 1, "n2": 1}, per_node
    assert set(per_node["DeepSpeedLearnerRank"]) == {"n1", "n2"}, per_node
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["engine/version"] for r in rows if "engine/version" in r] == [1.0, 2.0]
    assert all(r["engine/sync_bytes"] > 0 for r in rows if "engine/sync_bytes" in r)
    assert not ray_processes_of(job), "Ray processes outlived the job"


def test_bad_input_is_refused_with_the_fix(slurm: dict[str, str], tmp_path: Path) -> None:
    too_many = launch(slurm, tmp_path / "a", "nodes=2", "cpus_per_node=1", "recipe=debug", "learner.num_ranks=4",
                      check=False)
    assert too_many.returncode == 2  # a config problem (exit 2, like every config error since the typed schema)
    assert "learner.num_ranks=4 needs 4 slots" in too_many.stderr and "lower learner.num_ranks" in too_many.stderr
    assert not (tmp_path / "a").exists()  # nothing submitted, nothing written

    bad_partition = launch(slurm, tmp_path / "b", "partition=nope", "recipe=debug", check=False)
    assert bad_partition.returncode == 1
    assert "invalid partition" in bad_partition.stderr.lower() and "sinfo -s" in bad_partition.stderr

    bad_time = launch(slurm, tmp_path / "c", "time=soon", "recipe=debug", check=False)
    assert bad_time.returncode == 2 and "is not a Slurm time" in bad_time.stderr


def test_node_that_cannot_join_fails_the_job_naming_it(slurm: dict[str, str], tmp_path: Path) -> None:
    """n2's Ray cannot start (a file sits where its temp dir goes, planted right after submission: the head comes up
    first). The job must fail naming n2 well within join_timeout, before the trainer starts, and leave no Ray process
    behind. (The timeout path itself, a head that never answers, is tests/integration/test_wait_cluster.py.)"""
    import tempfile

    run_dir = tmp_path / "run"
    ray_tmp = Path(tempfile.mkdtemp(prefix="afrt", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    env = {**slurm, "AGENTFORGE_RAY_TMP": str(ray_tmp)}  # sbatch exports it to the job
    launch(env, run_dir, "nodes=2", "cpus_per_node=2", "time=10:00", "signal_seconds=60", "ray_port=23300",
           "join_timeout=120", *TINY_RUN, "trainer.iterations=1")
    job = job_id(run_dir)
    (ray_tmp / f"af-ray-{job}-n2").write_text("not a directory")
    log = run_dir / f"slurm-{job}.out"
    state = wait_for_end(job, slurm, timeout=240, log=log)
    text = log.read_text()
    assert state == "FAILED", text[-3000:]
    assert "Ray on n2 exited before the cluster was ready" in text, text[-3000:]
    assert f"{run_dir}/ray-n2.log" in text
    assert "Ray cluster torn down; exit status 1" in text
    assert "trainer:" not in text  # the trainer never started
    assert not ray_processes_of(job), "Ray processes outlived the failed job"


def test_lost_head_node_fails_the_job_instead_of_hanging(slurm: dict[str, str], tmp_path: Path) -> None:
    """The head's Ray goes away while the trainer runs (its `ray start --block` killed, as when the node dies): the
    job stops the trainer and fails within seconds, tears down the other node, and never waits for its time limit."""
    run_dir = tmp_path / "run"
    launch(slurm, run_dir, "nodes=2", "cpus_per_node=2", "time=30:00", "signal_seconds=60", "ray_port=23900",
           "join_timeout=120", *TINY_RUN, "trainer.iterations=50")
    job = job_id(run_dir)
    log = run_dir / f"slurm-{job}.out"
    wait_until(lambda: len(metric_steps(run_dir)) >= 1, 600, "the first iteration", log)
    heads = [p for p in ray_processes_of(job)  # `ray start --head --block` itself, not the `srun` that runs it
             if p.name() != "srun" and "--head" in p.cmdline() and "--block" in p.cmdline()]
    assert len(heads) == 1, heads
    heads[0].kill()
    state = wait_for_end(job, slurm, timeout=240, log=log)
    text = log.read_text()
    assert state == "FAILED", text[-3000:]
    assert "the Ray head on n1 exited while the trainer ran" in text, text[-3000:]
    assert "Ray cluster torn down; exit status 1" in text
    assert not ray_processes_of(job), "Ray processes outlived the failed job"
