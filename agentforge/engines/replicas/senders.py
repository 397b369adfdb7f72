"""Who sends a push over the weight group (its rank 0): the trainer's process when the learner lives there (or for
any list of tensors), or learner rank 0's own actor, so a multi-rank learner's weights never pass through Ray's
object store and the driver."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch

from agentforge.engines.replicas.weight_group import Manifest, WeightGroupMember, plan_buckets


class WeightSender(Protocol):
    key: str  # the same key: the same sender, so a formed group is kept

    def address(self) -> str: ...

    def join(self, host: str, port: int, world_size: int, backend: str, timeout_s: float) -> list[Any]:
        """Become rank 0; may block until every replica joined (then returns no refs) or return Ray refs."""
        ...

    def prepare(self, version: int, bucket_bytes: int) -> Manifest: ...

    def send(self, manifest: Manifest) -> None: ...

    def leave(self) -> None: ...


class LocalSender:
    """Tensors in this process (the in-process learner's export, a checkpoint's weights)."""

    key = "local"

    def __init__(self) -> None:
        self.member: WeightGroupMember | None = None
        self.named: Sequence[tuple[str, torch.Tensor]] = ()

    def load(self, named: Sequence[tuple[str, torch.Tensor]]) -> LocalSender:
        self.named = named
        return self

    def address(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def join(self, host: str, port: int, world_size: int, backend: str, timeout_s: float) -> list[Any]:
        self.leave()
        self.member = WeightGroupMember(host, port, 0, world_size, backend, timeout_s)
        return []

    def prepare(self, version: int, bucket_bytes: int) -> Manifest:
        return plan_buckets(list(self.named), bucket_bytes, version)

    def send(self, manifest: Manifest) -> None:
        assert self.member is not None
        self.member.send(manifest, self.named)
        self.named = ()

    def leave(self) -> None:
        if self.member is not None:
            self.member.close()
            self.member = None


class LearnerRankZeroSender:
    """Learner rank 0's actor sends; every rank takes part in the export (a collective under ZeRO-3)."""

    key = "learner-rank-0"

    def __init__(self, actors: list[Any]) -> None:
        self.actors = actors

    def address(self) -> str:
        import ray

        return ray.get(self.actors[0].node_address.remote())

    def join(self, host: str, port: int, world_size: int, backend: str, timeout_s: float) -> list[Any]:
        return [self.actors[0].join_weight_group.remote(host, port, world_size, backend, timeout_s)]

    def prepare(self, version: int, bucket_bytes: int) -> Manifest:
        import ray

        return ray.get([a.prepare_push.remote(version, bucket_bytes) for a in self.actors])[0]

    def send(self, manifest: Manifest) -> None:
        import ray

        ray.get(self.actors[0].send_push.remote(manifest))

    def leave(self) -> None:
        import ray

        ray.get(self.actors[0].leave_weight_group.remote())
