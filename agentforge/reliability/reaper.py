"""Kills what a run started when the run itself is killed (SIGKILL, OOM killer): no orphaned Ray agents.

Why: `ray.init()` in the driver starts gcs_server, raylet and their children. A driver stopped by SIGKILL cannot run
`ray.shutdown()`; raylet and gcs notice and exit, but Ray's DashboardAgent and RuntimeEnvAgent (children of raylet)
were seen to live on, re-parented to init, one pair per killed run. `ray stop` would kill every Ray process on the
machine, other users' included. Instead a small watcher process, started once per driver in its own session (so a
terminal's signals to the run's group do not reach it), records the driver's descendants every second; when the
driver is gone it terminates those still alive (same pid *and* start time, so a reused pid is never hit) and their
children, then exits. A run that ends normally has already closed everything: the watcher then finds nothing.
`AGENTFORGE_REAPER=0` turns it off.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import psutil

ENV_SWITCH = "AGENTFORGE_REAPER"
POLL_SECONDS = 1.0
GRACE_SECONDS = 3.0

_started_for: int | None = None


def start_reaper() -> int | None:
    """Start the watcher for this process once (idempotent); returns its pid, or None when turned off."""
    global _started_for
    if os.environ.get(ENV_SWITCH, "1") == "0" or _started_for == os.getpid():
        return None
    _started_for = os.getpid()
    watcher = subprocess.Popen(
        [sys.executable, "-P", "-m", "agentforge.reliability.reaper", str(os.getpid())],  # -P: not the cwd first
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True,
    )
    return watcher.pid


def _descendants(driver: psutil.Process, me: int) -> dict[int, float]:
    try:
        found = driver.children(recursive=True)
    except psutil.Error:
        return {}
    out = {}
    for proc in found:
        try:
            if proc.pid != me:
                out[proc.pid] = proc.create_time()
        except psutil.Error:
            continue
    return out


def _still_ours(pid: int, created: float) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        return proc if abs(proc.create_time() - created) < 0.01 else None
    except psutil.Error:
        return None


def reap(known: dict[int, float]) -> list[int]:
    """Terminate the recorded processes still alive and their children (SIGKILL after a grace); returns pids hit."""
    targets: dict[int, psutil.Process] = {}
    for pid, created in known.items():
        proc = _still_ours(pid, created)
        if proc is None:
            continue
        targets[proc.pid] = proc
        with contextlib.suppress(psutil.Error):
            targets.update({child.pid: child for child in proc.children(recursive=True)})
    targets.pop(os.getpid(), None)
    for proc in targets.values():
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(list(targets.values()), timeout=GRACE_SECONDS)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return sorted(targets)


def watch(driver_pid: int) -> None:
    """Record the driver's descendants until it is gone, then reap them."""
    try:
        driver = psutil.Process(driver_pid)
        started = driver.create_time()
    except psutil.Error:
        return
    known: dict[int, float] = {}
    me = os.getpid()
    while _alive(driver, started):
        known.update(_descendants(driver, me))
        time.sleep(POLL_SECONDS)
    reap(known)


def _alive(driver: psutil.Process, started: float) -> bool:
    """Running, not a zombie its parent has yet to collect (a killed driver's children are already re-parented)."""
    try:
        return abs(driver.create_time() - started) < 0.01 and driver.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


if __name__ == "__main__":
    watch(int(sys.argv[1]))
