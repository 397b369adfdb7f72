"""What every benchmark shares: this checkout on sys.path, where results go, writing one and printing its line, the
line a measuring child process hands its parent, and a run's metrics.

Named `_report`, not `_io`: a benchmark runs as `python benchmarks/<name>.py`, which puts benchmarks/ first on
sys.path, and a `_io.py` there would shadow CPython's builtin `_io` module (what `io` and `open()` are built on) for
that process and everything it imports.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
if str(REPO) not in sys.path:  # agentforge from this checkout, installed or not
    sys.path.insert(0, str(REPO))


def write_result(name: str, report: Mapping[str, Any]) -> Path:
    """benchmarks/results/<name>.json, indented."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def publish(name: str, report: Mapping[str, Any], line: str) -> Path:
    """Write the result and print the benchmark's one summary line, naming the file."""
    path = write_result(name, report)
    print(f"{line} -> {path.relative_to(REPO)}", flush=True)
    return path


def run_child(command: list[str], **popen: Any) -> int:
    """Run a benchmark's measured process to its end and return its exit status. A SIGTERM or SIGHUP sent to the
    benchmark is passed on (a training run then checkpoints and stops), so stopping a benchmark never leaves its run
    going on alone, writing into a run dir that a restarted benchmark may reuse. (Ctrl-C reaches both already: a
    terminal signals the whole process group.)"""
    child = subprocess.Popen(command, **popen)

    def forward(signum: int, _frame: Any) -> None:
        child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def hand_to_parent(value: Any, tag: str = "RESULT") -> None:
    """A child process's measurement, as its last stdout line (`read_child` finds it)."""
    print(f"{tag} " + json.dumps(value), flush=True)


def read_child(out: subprocess.CompletedProcess, what: str, tag: str = "RESULT") -> Any:
    """The value a child process printed with `hand_to_parent` (its last such line); its stderr's end when it
    failed or printed none."""
    lines = [line for line in out.stdout.splitlines() if line.startswith(f"{tag} ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{what} failed:\n{out.stderr[-4000:]}")
    return json.loads(lines[-1].removeprefix(f"{tag} "))


def metric_rows(run_dir: Path | str) -> list[dict[str, Any]]:
    """A run's metrics.jsonl, one dict per logged iteration."""
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
