"""`python -m agentforge.cluster.wait_cluster --nodes N --timeout S [--expect n1,n2]`: wait until N nodes are alive
in the Ray cluster at RAY_ADDRESS, or fail with the nodes that did not join. The sbatch script runs it between
starting Ray on every node and starting the trainer, so a node that never joins ends the job in `--timeout`
seconds with its name, instead of a trainer waiting for resources until the time limit."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from agentforge.cluster.placement import NODE_LABEL


def alive_nodes() -> list[str]:
    import ray

    return sorted(str(n.get("Labels", {}).get(NODE_LABEL) or n["NodeManagerAddress"]) for n in ray.nodes()
                  if n.get("Alive"))


def _fail(message: str) -> None:
    print(f"agentforge: error: {message}", file=sys.stderr, flush=True)
    os._exit(1)  # from a thread or a signal handler, and out of a `ray.init` that keeps retrying


def _watch(watched: dict[str, int], run_dir: str, deadline: float, late: str) -> None:
    """A node's `srun` (its `ray start --block`) that exits before the cluster is ready fails the wait at once; past
    the deadline the wait fails too. A thread: `ray.init` retries an unreachable head inside C++ for minutes, where
    neither a Python signal handler nor the main loop gets to run."""
    def loop() -> None:
        while True:
            if time.monotonic() > deadline + 2:
                _fail(late)
            for node, pid in watched.items():
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    _fail(f"Ray on {node} exited before the cluster was ready; its output: {run_dir}/ray-{node}.log")
                except PermissionError:
                    pass
            time.sleep(1)

    threading.Thread(target=loop, daemon=True).start()


def wait(nodes: int, timeout: float, expect: list[str], watched: dict[str, int] | None = None,
         run_dir: str = ".") -> int:
    import ray

    started = time.monotonic()
    deadline = started + timeout
    _watch(watched or {}, run_dir, deadline,
           f"the Ray cluster at {os.environ.get('RAY_ADDRESS')} was not ready within {timeout:.0f} s (expected "
           f"{', '.join(expect) or nodes}); see {run_dir}/ray-<node>.log, or raise join_timeout")
    while True:  # the head itself may still be starting: connecting is part of the wait
        try:
            ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False, logging_level="ERROR")
            break
        except Exception as error:
            if time.monotonic() > deadline:
                print(f"agentforge: error: the Ray head at {os.environ.get('RAY_ADDRESS')} did not answer within "
                      f"{timeout:.0f} s ({type(error).__name__}: {error}); see the head node's Ray logs",
                      file=sys.stderr)
                return 1
            time.sleep(2)
    try:
        joined: list[str] = []
        while time.monotonic() < deadline:
            joined = alive_nodes()
            if len(joined) >= nodes:
                print(f"agentforge: Ray cluster ready: {len(joined)} node(s) ({', '.join(joined)}) after "
                      f"{time.monotonic() - started:.0f} s", flush=True)
                return 0
            time.sleep(1)
        missing = [n for n in expect if n not in joined] or [f"{nodes - len(joined)} node(s)"]
        print(f"agentforge: error: {', '.join(missing)} did not join the Ray cluster within {timeout:.0f} s (joined: "
              f"{', '.join(joined) or 'none'}); the job stops here. Check those nodes' lines above and their Ray "
              "logs (the temp dir in the job script), or raise join_timeout", file=sys.stderr)
        return 1
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument("--expect", default="", help="comma-separated node names, to name the missing ones")
    parser.add_argument("--watch", default="", help="node:pid,... of the nodes' `srun ray start`; one exiting fails")
    parser.add_argument("--run-dir", default=".", help="where the nodes' Ray output is (ray-<node>.log)")
    args = parser.parse_args(argv)
    watched = {node: int(pid) for node, _, pid in (item.partition(":") for item in args.watch.split(",") if item)}
    return wait(args.nodes, args.timeout, [n for n in args.expect.split(",") if n], watched, args.run_dir)


if __name__ == "__main__":
    sys.exit(main())
