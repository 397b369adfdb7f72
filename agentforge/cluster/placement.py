"""Where a run's work landed: each live Ray actor's class and node (with the node's Slurm name when a launch tagged
it), written to `<run dir>/placement.json`. The Slurm test reads it to check that env workers and learner ranks ran
on both nodes; on a real cluster it answers "did the spread work?" without Ray's dashboard."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

log = logging.getLogger("agentforge.launch")

NODE_LABEL = "slurm_node"  # the label `agentforge launch slurm` gives each Ray node (its Slurm node name)
FILENAME = "placement.json"


def placement() -> dict[str, Any]:
    """Nodes and live actors of the connected Ray cluster (GCS tables: no dashboard needed)."""
    import ray
    from ray._private import state  # the GCS actor table; ray.util.state needs the dashboard, which we do not start

    nodes = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}

    def node_name(node_id: str) -> str:
        node = nodes.get(node_id, {})
        return str(node.get("Labels", {}).get(NODE_LABEL) or node.get("NodeName") or node_id[:12])

    actors = [
        {"class": info.get("ActorClassName", "?"), "node_id": info["Address"]["NodeID"],
         "node": node_name(info["Address"]["NodeID"])}
        for info in state.actors().values() if info.get("State") == "ALIVE"
    ]
    by_class: dict[str, Counter[str]] = {}
    for actor in actors:
        by_class.setdefault(actor["class"], Counter())[actor["node"]] += 1
    return {
        "nodes": [{"node_id": i, "node": node_name(i), "address": n["NodeManagerAddress"],
                   "resources": n.get("Resources", {})} for i, n in nodes.items()],
        "actors": actors,
        "actors_per_node": {cls: dict(counts) for cls, counts in by_class.items()},
    }


def record_placement(run_dir: Path) -> Path | None:
    """Write placement.json when Ray runs; best effort (a run never fails for its report)."""
    try:
        import ray

        if not ray.is_initialized():
            return None
        path = Path(run_dir) / FILENAME
        path.write_text(json.dumps(placement(), indent=2))
        return path
    except Exception as error:  # a private Ray table that changed shape, a node going away: say so, go on
        log.warning("could not record where actors run: %s", error)
        return None


def ready_placement_group(bundle: dict[str, float], count: int, strategy: str, what: str, fix: str,
                          timeout_s: float) -> Any:
    """`count` copies of `bundle` as one placement group, ready; if Ray cannot place them within `timeout_s`, the
    group is removed and the error names what was asked, what the cluster has, and `fix`."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([dict(bundle) for _ in range(count)], strategy=strategy)
    try:
        ray.get(group.ready(), timeout=timeout_s)
    except Exception as error:
        remove_placement_group(group)
        from agentforge.errors import AgentforgeError

        raise AgentforgeError(f"could not place {count} {what} of {bundle} each ({strategy}); the Ray cluster has "
                              f"{ray.cluster_resources()} on {len(ray.nodes())} node(s); {fix}") from error
    return group
