"""Ray's own memory monitor kills an env worker under real memory pressure, and the pool survives it: restarted,
replayed, every episode as an undisturbed run plays it.

The monitor kills a worker when the machine's memory use passes `RAY_memory_usage_threshold`; the test starts Ray
in a fresh process with that threshold 2 GiB above what the machine uses now, and a user env that, on one step
(once), takes memory in 256 MiB chunks until it is killed (at most 6 GiB). What Ray raises for it
(`OutOfMemoryError` here, `ActorDiedError` for a killed idle actor) is the dead-worker path. Memory used by other
jobs on a shared machine can make the monitor kill a second worker too: that is recovered the same way (the test
only needs at least one kill).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

# serial: the threshold is set just above this machine's memory use; another test growing beside it (a parallel
# `make test` worker) crossed it and Ray killed this run's workers beyond their restart budget.
pytestmark = [pytest.mark.integration, pytest.mark.serial]

HERE = Path(__file__).parent
MARGIN = 2.0 * 2**30  # this run's own Ray and driver (~1 GiB) plus room for other jobs' noise


def test_a_worker_killed_by_rays_memory_monitor_is_restarted_and_replayed(tmp_path):
    memory = psutil.virtual_memory()
    if memory.available < 9 * 2**30:
        pytest.skip(f"only {memory.available / 2**30:.1f} GiB free: not enough to push the machine safely")
    threshold = (memory.total - memory.available + MARGIN) / memory.total
    env = {**os.environ, "RAY_memory_usage_threshold": f"{threshold:.4f}", "RAY_memory_monitor_refresh_ms": "100"}
    env.pop("RAY_ADDRESS", None)
    once = tmp_path / "hogged"
    run = subprocess.run([sys.executable, str(HERE / "memory_monitor_run.py"), str(once)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["hogged"] and result["equal"], result
    assert result["counts"]["restarts"] >= 1, result
    assert "died: OutOfMemoryError" in run.stderr or "died: ActorDiedError" in run.stderr, run.stderr[-3000:]
