"""Peak resident memory of a process tree (the driver plus everything it started: Ray's gcs, raylet, env workers),
sampled on a thread: what the load test bounds and the benchmarks report.

The figure is the sum of every process's RSS, so pages shared between processes (Ray's object store, the Python
runtime's shared libraries) count once per process: an upper bound of what the tree holds.
"""

from __future__ import annotations

import os
import threading

import psutil


def tree_rss(pid: int) -> int:
    """Bytes resident in `pid` and all its descendants now."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


class PeakTreeRSS:
    """Context manager: samples `tree_rss(pid)` every `interval` seconds; `.peak` (bytes) when it ends."""

    def __init__(self, pid: int | None = None, interval: float = 0.2) -> None:
        self.pid = pid or os.getpid()
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-tree-rss", daemon=True)

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, tree_rss(self.pid))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakTreeRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss(self.pid))
