"""`make demo`'s training run as a new user gets it: wall time, peak RSS of the training process, and what it learned.

    python benchmarks/demo.py [--dtype auto] [extra overrides ...]

Runs `agentforge train recipe=sokoban_demo` (after `make setup`; the time excludes installing) in a fresh process,
samples its RSS every 0.5 s, and reads the run's summary (each eval with its 95 % interval). Writes
benchmarks/results/demo_<dtype>.json (with the hardware) and prints one summary line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import publish


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="auto", help="model.dtype: auto | float32 | bfloat16")
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides")
    args = parser.parse_args()

    import psutil

    from agentforge.hardware import describe, resolve_dtype

    run_dir = Path(tempfile.mkdtemp(prefix="agentforge-demo-")) / "run"
    log = run_dir.parent / "log.txt"
    command = [sys.executable, "-m", "agentforge.cli", "train", "recipe=sokoban_demo", f"model.dtype={args.dtype}",
               "logger.wandb=false", f"hydra.run.dir={run_dir}", *args.overrides]
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        handle, peak, peak_total = psutil.Process(proc.pid), 0, 0
        while proc.poll() is None:
            try:
                rss = handle.memory_info().rss
                children = sum(c.memory_info().rss for c in handle.children(recursive=True) if c.is_running())
            except psutil.Error:
                time.sleep(0.5)
                continue
            peak, peak_total = max(peak, rss), max(peak_total, rss + children)
            time.sleep(0.5)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"the demo failed (exit {proc.returncode}); log: {log}\n{log.read_text()[-3000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary = summary.get("test") or summary  # the claim's split (test) where the run has one, else the eval split
    rows = summary.get("evals", [])
    dtype = resolve_dtype(args.dtype)[0]
    report = {"command": command, "hardware": describe(dtype), "wall_seconds": wall, "peak_rss_gb": peak / 1e9,
              "peak_rss_with_children_gb": peak_total / 1e9,
              "evals": rows, "verdict": summary.get("verdict"), "log": str(log)}
    evals = " → ".join(f"{r['name']} {r['success']:.0%} [{r['success_interval'][0]:.0%}, "
                       f"{r['success_interval'][1]:.0%}]"
                       + (f" valid {r['valid_format']:.0%}" if r.get("valid_format") is not None else "")
                       for r in rows)
    publish(f"demo_{dtype}", report,
            f"demo {dtype} [{report['hardware']['cpu_kind']}]: {wall / 60:.1f} min, peak RSS {peak / 1e9:.2f} GB "
            f"({peak_total / 1e9:.2f} GB with its workers) | "
            f"{evals}")


if __name__ == "__main__":
    main()
