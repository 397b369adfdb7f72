"""The `engine` group's replica keys (the rest of the group configures each replica's engine)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentforge.errors import ConfigError

REPLICA_KEYS = ("replicas", "replica_cpus", "colocate", "weight_sync", "sync_backend", "sync_bucket_mb",
                "sync_timeout_s", "sync_port", "placement_strategy", "max_restarts", "interrupt_tokens")
WEIGHT_SYNC = ("process_group", "object_store")


@dataclass(frozen=True)
class ReplicaOptions:
    replicas: int | None = None  # None: the in-process engine
    replica_cpus: int = 1
    colocate: bool = False
    weight_sync: str = "process_group"
    sync_backend: str = "auto"
    sync_bucket_mb: float = 256.0
    sync_timeout_s: float = 300.0
    sync_port: int = 0
    placement_strategy: str = "SPREAD"
    max_restarts: int = 3
    interrupt_tokens: int = 0  # 0: a push waits for the replica's generate call; N: it lands within N tokens

    @classmethod
    def split(cls, engine_options: dict[str, Any]) -> tuple[ReplicaOptions, dict[str, Any]]:
        """(replica options, the engine's own options) from the `engine` group's keys."""
        mine = {k: engine_options[k] for k in REPLICA_KEYS if k in engine_options}
        rest = {k: v for k, v in engine_options.items() if k not in REPLICA_KEYS}
        options = cls(**mine)
        options.validate()
        return options, rest

    @property
    def enabled(self) -> bool:
        return self.replicas is not None

    def validate(self) -> None:
        if self.replicas is not None and self.replicas < 1:
            raise ConfigError(f"engine.replicas={self.replicas}: use 1 or more Ray-hosted engines, or null for the "
                              "in-process engine")
        if self.interrupt_tokens < 0:
            raise ConfigError(f"engine.interrupt_tokens={self.interrupt_tokens} must be >= 0 (0: pushes wait for "
                              "a replica's generate call to end)")
        if self.interrupt_tokens and self.replicas is None:
            raise ConfigError(f"engine.interrupt_tokens={self.interrupt_tokens} lets a weight push interrupt a "
                              "replica's generation; the in-process engine (engine.replicas=null) is never pushed to "
                              "while it generates: set engine.replicas, or engine.interrupt_tokens=0")
        if self.replica_cpus < 1:
            raise ConfigError(f"engine.replica_cpus={self.replica_cpus} must be >= 1")
        if self.weight_sync not in WEIGHT_SYNC:
            raise ConfigError(f"engine.weight_sync={self.weight_sync!r} is unknown; use {' or '.join(WEIGHT_SYNC)}")
        if self.sync_backend not in ("auto", "gloo", "nccl"):
            raise ConfigError(f"engine.sync_backend={self.sync_backend!r} is unknown; use auto, gloo or nccl")
        if self.sync_bucket_mb <= 0 or self.sync_timeout_s <= 0:
            raise ConfigError("engine.sync_bucket_mb and engine.sync_timeout_s must be > 0")
        if self.placement_strategy not in ("SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"):
            raise ConfigError(f"engine.placement_strategy={self.placement_strategy!r} is unknown; use SPREAD, PACK, "
                              "STRICT_SPREAD or STRICT_PACK")


def check_replica_config(cfg: Any) -> None:
    """Replicas run in other processes: the recipe's decoding intervention must be importable there (a built-in
    kind, or a dotted path `pkg.mod:Class`), not a class registered only in the trainer's process."""
    engine = cfg.get("engine") or {}
    if engine.get("replicas") is None:
        return
    from agentforge.engines.interventions import INTERVENTIONS

    agent = cfg.get("agent") or {}
    spec = agent.get("intervention")
    kind = str(spec.get("kind")) if spec is not None and spec.get("kind") is not None else None
    if kind is None or ":" in kind or kind in INTERVENTIONS.builtin_names():
        return
    raise ConfigError(f"agent.intervention.kind={kind!r} is registered only in this process, and engine.replicas="
                      f"{engine.get('replicas')} hosts the engines in other processes that cannot see it; name it by "
                      "dotted path (kind=pkg.module:Class) or use the in-process engine (engine.replicas=null)")
