"""`EngineReplica`: one rollout engine in its own process (a Ray actor), with everything the in-process engine
offers: generation with log-probs, per-token uncertainty and decoding interventions, `score`, reseeding, weight
pushes (over the weight group or through the object store), sleep and wake.

With `interrupt_tokens` > 0 the actor is threaded (the pool starts it with `max_concurrency` > 1): a push arriving
while a generate call runs is taken between two of its chunks (`interruptible.py`) rather than after the call. Every
use of the engine holds one lock; a waiting push goes before the next chunk.

The class is plain so tests and the replica pool can build it; `ray.remote` wraps it where it is placed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from agentforge.engines.interventions import InterventionSpec
from agentforge.engines.replicas.interruptible import can_interrupt, generate_in_chunks
from agentforge.engines.replicas.weight_group import Manifest, WeightGroupMember
from agentforge.types import Completion, SamplingConfig


class EngineReplica:
    """Builds the engine named `name` for `spec` with `options` (the `engine` group's own), using `threads` CPU
    threads. `events` records the calls that change its state (for the colocated call-order check);
    `interrupt_tokens` > 0 splits generate calls into chunks a push may come between."""

    def __init__(self, index: int, name: str, spec: Any, options: dict[str, Any], threads: int,
                 interrupt_tokens: int = 0) -> None:
        from agentforge.engines import make_engine

        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)
        self.index = index
        self.engine = make_engine(name, spec, options)
        self.version = 0
        self.events: list[tuple[str, int]] = []
        self._group: WeightGroupMember | None = None
        self.interrupt_tokens = int(interrupt_tokens)
        self.generated_tokens = 0  # by chunked generation, all calls together (tests push mid-call by it)
        self._engine_lock = threading.Condition()
        self._pushes_waiting = 0
        self._count_lock = threading.Lock()

    @contextlib.contextmanager
    def _engine(self, push: bool = False) -> Iterator[None]:
        """The engine to this thread alone; a push (`push=True`) goes before any chunk not yet started."""
        if push:
            with self._count_lock:
                self._pushes_waiting += 1
        try:
            with self._engine_lock:
                yield
        finally:
            if push:
                with self._count_lock:
                    self._pushes_waiting -= 1
                with self._engine_lock:
                    self._engine_lock.notify_all()

    def _run_chunk(self, prompts: list[list[int]], sampling: SamplingConfig) -> tuple[int, list[Completion]]:
        with self._engine_lock:
            self._engine_lock.wait_for(lambda: self._pushes_waiting == 0)
            completions = self.engine.generate(prompts, sampling)
            self.generated_tokens += sum(len(c.token_ids) for c in completions)
            return self.version, completions

    # --------------------------------------------------------------------------------------- what it is
    def describe(self) -> dict[str, Any]:
        import ray

        return {"index": self.index, "pid": os.getpid(), "node_ip": ray.util.get_node_ip_address(),
                "node_id": ray.get_runtime_context().get_node_id(), "vocab_size": int(self.engine.vocab_size),
                "threads": torch.get_num_threads(), "version": self.version}

    def ping(self) -> int:
        return self.version

    def chunked_tokens(self) -> int:
        """Tokens generated so far in chunks (interruptible generation), all calls together."""
        return self.generated_tokens

    # --------------------------------------------------------------------------------------- generation
    def generate(self, prompts: list[list[int]], sampling: SamplingConfig,
                 interventions: list[InterventionSpec | None] | None = None) -> tuple[int, list[Completion]]:
        """The completions and the weight version that sampled them."""
        from agentforge.engines.interventions import ensure_token_pieces

        ensure_token_pieces(interventions, self.engine.tokenizer)  # T2PO's TTI names its token texts by key
        if self.interrupt_tokens > 0 and can_interrupt(sampling, interventions):
            completions = generate_in_chunks(self._run_chunk, self.engine.tokenizer, prompts, sampling,
                                             self.interrupt_tokens, getattr(self.engine, "max_model_len", None))
            return (completions[0].policy_version if completions else self.version), completions
        with self._engine():
            return self.version, self.engine.generate(prompts, sampling, interventions)

    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        with self._engine():
            return self.engine.score(prompts, responses)

    def reseed(self, seed: int) -> None:
        with self._engine():
            self.engine.reseed(seed)

    # --------------------------------------------------------------------------------------- weights
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> int:
        """The object-store path: the tensors arrive as the call's argument."""
        with self._engine(push=True):
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
        with self._engine(push=True):  # all buckets before the next chunk: no chunk sees half a push
            for tensors in self._group.receive(manifest):
                t0 = time.perf_counter()
                self.engine.update_weights(tensors)
                waited += time.perf_counter() - t0
            self.version = manifest.version
            self.events.append(("update_weights", manifest.version))
        return {"version": float(manifest.version), "seconds": time.perf_counter() - started, "load_seconds": waited}

    # --------------------------------------------------------------------------------------- memory
    def sleep(self) -> None:
        with self._engine():
            self.engine.sleep()
            self.events.append(("sleep", self.version))

    def wake(self) -> None:
        with self._engine():
            self.engine.wake()
            self.events.append(("wake", self.version))

    def take_events(self) -> list[tuple[str, int]]:
        events, self.events = self.events, []
        return events

    def close(self) -> None:
        self.leave_weight_group()
        with self._engine():
            self.engine.close()
