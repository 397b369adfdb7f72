"""Named points where a reliability test can stop a real run: a no-op unless AGENTFORGE_FAULT_AT is set.

A test that wants to SIGKILL `agentforge train` "mid-checkpoint-write" cannot hit a 50 ms window by polling. With
`AGENTFORGE_FAULT_AT=<name>:<n>` the n-th time the run reaches the point called <name> it writes `<name>:<n>` to
`AGENTFORGE_FAULT_FILE` and sleeps (`AGENTFORGE_FAULT_SLEEP` seconds, 600 by default), so the test can kill the
process exactly there. Nothing is faked: the run is stopped inside the real work (between a backward pass and the
optimizer step, between writing a checkpoint's files and publishing it, between two env steps).
"""

from __future__ import annotations

import os
import time
from collections import Counter

FAULT_AT = "AGENTFORGE_FAULT_AT"
FAULT_FILE = "AGENTFORGE_FAULT_FILE"
FAULT_SLEEP = "AGENTFORGE_FAULT_SLEEP"

_hits: Counter[str] = Counter()


def fault_point(name: str) -> None:
    """Mark a point of the run; when AGENTFORGE_FAULT_AT names it (and its hit count), announce it and sleep."""
    spec = os.environ.get(FAULT_AT)
    if not spec:
        return
    wanted, _, count = spec.partition(":")
    if wanted != name:
        return
    _hits[name] += 1
    if _hits[name] != int(count or 1):
        return
    target = os.environ.get(FAULT_FILE)
    if target:
        with open(target, "w") as out:
            out.write(f"{name}:{_hits[name]}\n")
            out.flush()
            os.fsync(out.fileno())
    time.sleep(float(os.environ.get(FAULT_SLEEP, "600")))
