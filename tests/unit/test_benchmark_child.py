"""benchmarks/_report.run_child: stopping a benchmark (SIGTERM) stops the run it measures, not only itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

PARENT = """
import sys
sys.path.insert(0, {benchmarks!r})
from _report import run_child
code = run_child([sys.executable, "-c",
                  "import signal, sys, time, pathlib\\n"
                  "def stop(*_):\\n"
                  "    pathlib.Path({marker!r}).write_text('stopped')\\n"
                  "    sys.exit(3)\\n"
                  "signal.signal(signal.SIGTERM, stop)\\n"
                  "pathlib.Path({ready!r}).write_text('ready')\\n"
                  "time.sleep(60)"])
print("child exit", code, flush=True)
"""


def test_a_sigterm_to_the_benchmark_reaches_its_child(tmp_path: Path) -> None:
    marker, ready = tmp_path / "stopped", tmp_path / "ready"
    code = PARENT.format(benchmarks=str(BENCHMARKS), marker=str(marker), ready=str(ready))
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), "the child never started"
    os.kill(parent.pid, signal.SIGTERM)
    out, _ = parent.communicate(timeout=30)
    assert marker.read_text() == "stopped"  # the child got the SIGTERM and ran its own handler
    assert "child exit 3" in out  # and the benchmark waited for it
