"""Weights from the learner's process to every engine replica over one `torch.distributed` process group.

Why not Ray's object store: a push there is serialised once, copied into the store, then read by every replica (for
a 7B model 14 GB through the store per update). A broadcast moves each byte once per link, and on GPUs the same code
runs with NCCL (device to device) instead of gloo. The group is its own: a TCPStore and a `ProcessGroupGloo` /
`ProcessGroupNCCL` made directly, so it never touches the default group the learner's DeepSpeed ranks use.

One push: the sender plans buckets (tensors of one dtype, packed flat up to `bucket_bytes`), tells each replica the
plan through a Ray call (the manifest: names, shapes, dtypes, bucket boundaries, the version), then broadcasts bucket
after bucket; a replica unpacks each bucket into its engine as it arrives, so it never holds a second full copy.
"""

from __future__ import annotations

import contextlib
import datetime
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import torch

from agentforge.errors import AgentforgeError

DTYPES = {str(d): d for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
                              torch.uint8, torch.int8, torch.bool)}


@dataclass(frozen=True)
class TensorEntry:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True)
class Bucket:
    """Tensors of one dtype sent as one flat broadcast."""

    dtype: str
    entries: tuple[TensorEntry, ...]

    @property
    def numel(self) -> int:
        return sum(e.numel for e in self.entries)

    @property
    def nbytes(self) -> int:
        return self.numel * torch.empty((), dtype=DTYPES[self.dtype]).element_size()


@dataclass(frozen=True)
class Manifest:
    """What one push carries, in order: what a replica needs to receive it."""

    version: int
    buckets: tuple[Bucket, ...] = field(default_factory=tuple)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buckets)


def plan_buckets(named: list[tuple[str, torch.Tensor]], bucket_bytes: int, version: int) -> Manifest:
    """Group tensors (in their order) into flat buckets of one dtype, each at most `bucket_bytes` unless a single
    tensor is larger (it then travels alone)."""
    buckets: list[Bucket] = []
    current: list[TensorEntry] = []
    current_dtype, current_bytes = "", 0
    for name, tensor in named:
        entry = TensorEntry(name, tuple(tensor.shape), str(tensor.dtype))
        if str(tensor.dtype) not in DTYPES:
            raise AgentforgeError(f"weight {name} has dtype {tensor.dtype}, which the weight group cannot send")
        size = tensor.numel() * tensor.element_size()
        if current and (entry.dtype != current_dtype or current_bytes + size > bucket_bytes):
            buckets.append(Bucket(current_dtype, tuple(current)))
            current, current_bytes = [], 0
        current.append(entry)
        current_dtype = entry.dtype
        current_bytes += size
    if current:
        buckets.append(Bucket(current_dtype, tuple(current)))
    return Manifest(version, tuple(buckets))


def pack(bucket: Bucket, tensors: dict[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    return torch.cat([tensors[e.name].detach().reshape(-1).to(device) for e in bucket.entries])


def unpack(bucket: Bucket, flat: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    offset = 0
    for e in bucket.entries:
        yield e.name, flat[offset:offset + e.numel].view(e.shape)
        offset += e.numel


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class WeightGroupMember:
    """One end of the weight group: rank 0 sends (the learner's process), ranks 1.. receive (the replicas)."""

    def __init__(self, host: str, port: int, rank: int, world_size: int, backend: str, timeout_s: float) -> None:
        timeout = datetime.timedelta(seconds=timeout_s)
        try:
            self.store = torch.distributed.TCPStore(host, port, world_size, rank == 0, timeout=timeout)
        except Exception as error:  # port in use, host unreachable
            raise AgentforgeError(f"the weight group could not form at {host}:{port} (rank {rank} of {world_size}): "
                                  f"{error}; set engine.sync_port to a free port (0 picks one) and check that the "
                                  "replicas' nodes reach this address") from error
        self.rank, self.world_size, self.backend = rank, world_size, backend
        if backend == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())
            self.group = torch.distributed.ProcessGroupNCCL(self.store, rank, world_size)
        elif backend == "gloo":
            self.device = torch.device("cpu")
            self.group = torch.distributed.ProcessGroupGloo(self.store, rank, world_size, timeout)
        else:
            raise AgentforgeError(f"engine.sync_backend={backend!r} is unknown; use gloo (CPU) or nccl (GPU)")

    def broadcast(self, flat: torch.Tensor) -> None:
        options = torch.distributed.BroadcastOptions()
        options.rootRank = 0
        self.group.broadcast([flat], options).wait()

    def send(self, manifest: Manifest, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        tensors = dict(named)
        for bucket in manifest.buckets:
            self.broadcast(pack(bucket, tensors, self.device))

    def receive(self, manifest: Manifest) -> Iterator[list[tuple[str, torch.Tensor]]]:
        """Each bucket's tensors as it arrives (views into the bucket; the consumer copies them)."""
        for bucket in manifest.buckets:
            flat = torch.empty(bucket.numel, dtype=DTYPES[bucket.dtype], device=self.device)
            self.broadcast(flat)
            yield list(unpack(bucket, flat))

    def close(self) -> None:
        group = getattr(self, "group", None)
        self.group = None
        if group is not None and hasattr(group, "shutdown"):
            with contextlib.suppress(Exception):  # a peer already gone: nothing left to release
                group.shutdown()
