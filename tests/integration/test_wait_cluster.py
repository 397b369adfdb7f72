"""The sbatch script's wait for the Ray cluster, as a real process: a head that never answers fails the wait at the
timeout with the address and the fix (Ray's own `ray.init` would keep retrying for minutes), and a node's `ray start`
that exits fails it at once, naming the node."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.integration


def wait_cluster(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:1", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "agentforge.cluster.wait_cluster", *args], env=env,
                          capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - started


def test_a_head_that_never_answers_fails_at_the_timeout() -> None:
    proc, seconds = wait_cluster("--nodes", "2", "--timeout", "3", "--expect", "n1,n2", "--run-dir", "/runs/x")
    assert proc.returncode == 1
    assert "was not ready within 3 s (expected n1, n2)" in proc.stderr and "raise join_timeout" in proc.stderr
    assert seconds < 33, seconds


def test_a_node_whose_ray_exited_is_named_at_once() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    proc, seconds = wait_cluster("--nodes", "2", "--timeout", "100", "--watch", f"n2:{gone.pid}", "--run-dir", "/r")
    assert proc.returncode == 1
    assert "Ray on n2 exited before the cluster was ready; its output: /r/ray-n2.log" in proc.stderr
    assert seconds < 30, seconds
