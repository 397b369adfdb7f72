"""The `agentforge view` command line: arguments in, page path out."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentforge.viewer import write_page
from agentforge.viewer.load import parse_iterations

LARGE_PAGE_BYTES = 25_000_000  # ~2,000 episodes of Sokoban: loads in a few seconds, filters in about one

DESCRIPTION = """Write a run's trajectories as one static HTML page (no server, no network: open it in any browser).

RUN is a run dir a train, eval or rollout printed as `run dir:` (runs/train/<time>, runs/eval/<time>, ...) or a
trajectories .jsonl / .jsonl.gz file. Per iteration and group: successes and failures, every turn's observation
(Sokoban rooms, WebShop pages drawn; ALFWorld routes as a graph), reasoning, action, reward and advantage, forced
tokens marked, TJPO descriptors and credits, StraTA strategies and judgments."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentforge view", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="a run dir or a trajectories .jsonl(.gz) file")
    p.add_argument("-o", "--output", type=Path, default=None,
                   help="where to write the page (default: <run dir>/trajectories.html)")
    p.add_argument("--iterations", default=None, help="training iterations to include, e.g. 1,5,10-12 (default: all)")
    p.add_argument("--last", type=int, default=None, help="only the last N training iterations")
    return p


def view_command(args: list[str]) -> int:
    """Parse, write the page, print where it is; errors (AgentforgeError) are reported by the CLI's caller."""
    options = parser().parse_args(args)
    if options.last is not None and options.last < 1:
        print(f"agentforge view: --last {options.last} must be 1 or more", file=sys.stderr)
        return 2
    page = write_page(options.run, options.output, parse_iterations(options.iterations), options.last)
    size = page.stat().st_size
    print(f"trajectories page: {page} ({size / 1e6:.1f} MB)" if size >= 1e6 else
          f"trajectories page: {page} ({size / 1e3:.0f} kB)")
    print(f"open it in a browser: file://{page.resolve()}")
    if size > LARGE_PAGE_BYTES:
        print("a large page loads slowly: --last N or --iterations 1,10-12 keep it to the iterations you need")
    return 0
