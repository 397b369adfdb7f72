"""`EngineReplica`: one rollout engine in its own process (a Ray actor), with everything the in-process engine
offers: generation with log-probs, per-token uncertainty and decoding interventions, `score`, reseeding, weight
pushes (over the weight group or through the object store), sleep and wake.

The class is plain so tests and the replica pool can build it; `ray.remote` wraps it where it is placed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

import torch

from agentforge.engines.interventions import InterventionSpec
from agentforge.engines.replicas.weight_group import Manifest, WeightGroupMember
from agentforge.types import Completion, SamplingConfig


class EngineReplica:
    """Builds the engine named `name` for `spec` with `options` (the `engine` group's own), using `threads` CPU
    threads. `events` records the calls that change its state (for the colocated call-order check)."""

    def __init__(self, index: int, name: str, spec: Any, options: dict[str, Any], threads: int) -> None:
        from agentforge.engines import make_engine

        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)
        self.index = index
        self.engine = make_engine(name, spec, options)
        self.version = 0
        self.events: list[tuple[str, int]] = []
        self._group: WeightGroupMember | None = None

    # --------------------------------------------------------------------------------------- what it is
    def describe(self) -> dict[str, Any]:
        import ray

        return {"index": self.index, "pid": os.getpid(), "node_ip": ray.util.get_node_ip_address(),
                "node_id": ray.get_runtime_context().get_node_id(), "vocab_size": int(self.engine.vocab_size),
                "threads": torch.get_num_threads(), "version": self.version}

    def ping(self) -> int:
        return self.version

    # --------------------------------------------------------------------------------------- generation
    def generate(self, prompts: list[list[int]], sampling: SamplingConfig,
                 interventions: list[InterventionSpec | None] | None = None) -> tuple[int, list[Completion]]:
        """The completions and the weight version that sampled them."""
        from agentforge.engines.interventions import ensure_token_pieces

        ensure_token_pieces(interventions, self.engine.tokenizer)  # T2PO's TTI names its token texts by key
        return self.version, self.engine.generate(prompts, sampling, interventions)

    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        return self.engine.score(prompts, responses)

    def reseed(self, seed: int) -> None:
        self.engine.reseed(seed)

    # --------------------------------------------------------------------------------------- weights
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> int:
        """The object-store path: the tensors arrive as the call's argument."""
        self.engine.update_weights(named_tensors)
        self.version = version
        self.events.append(("update_weights", version))
        return version

    def join_weight_group(self, host: str, port: int, rank: int, world_size: int, backend: str,
                          timeout_s: float) -> int:
        self.leave_weight_group()
        self._group = WeightGroupMember(host, port, rank, world_size, backend, timeout_s)
        return rank

    def leave_weight_group(self) -> None:
        if self._group is not None:
            self._group.close()
            self._group = None

    def receive_weights(self, manifest: Manifest) -> dict[str, float]:
        """Take one push from the weight group, bucket by bucket into the engine; returns the version and timings."""
        if self._group is None:
            raise RuntimeError(f"replica {self.index} is not in a weight group")
        started = time.perf_counter()
        waited = 0.0
        for tensors in self._group.receive(manifest):
            t0 = time.perf_counter()
            self.engine.update_weights(tensors)
            waited += time.perf_counter() - t0
        self.version = manifest.version
        self.events.append(("update_weights", manifest.version))
        return {"version": float(manifest.version), "seconds": time.perf_counter() - started, "load_seconds": waited}

    # --------------------------------------------------------------------------------------- memory
    def sleep(self) -> None:
        self.engine.sleep()
        self.events.append(("sleep", self.version))

    def wake(self) -> None:
        self.engine.wake()
        self.events.append(("wake", self.version))

    def take_events(self) -> list[tuple[str, int]]:
        events, self.events = self.events, []
        return events

    def close(self) -> None:
        self.leave_weight_group()
        self.engine.close()
