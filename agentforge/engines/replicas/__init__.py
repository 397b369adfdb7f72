"""Engine replicas: rollout engines as Ray actors, a router, weights over a process group (see `engine.py`)."""

from agentforge.engines.replicas.engine import ReplicatedEngine
from agentforge.engines.replicas.options import REPLICA_KEYS, ReplicaOptions

__all__ = ["REPLICA_KEYS", "ReplicaOptions", "ReplicatedEngine"]
