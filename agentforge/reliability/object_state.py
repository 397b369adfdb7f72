"""agentforge's own objects (the played-but-untrained batches of asynchronous training) as plain values and tensors.

Why not pickle: a run dir may come from a shared `runs/` folder, and unpickling runs whatever the file names. Here a
batch becomes a tree of dicts, lists, strings, numbers and tensors, written by `torch.save` and read back with
`torch.load(weights_only=True)` (which builds nothing else). Objects are tagged by their class's name; on the way back
only agentforge's dataclasses and enums are rebuilt, without calling their `__init__` (fields are set as stored), and
any other name is refused. Objects reached twice (a group's trajectories also held by the rollout result) come back
as one object, as with pickle.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import logging
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import torch

from agentforge.reliability.safe_state import UnsafeStateError, load_tensors

log = logging.getLogger("agentforge.reliability.object_state")

FORMAT = 1
_TEXT_KEPT: set[str] = set()
_TAG = "__af__"  # every encoded non-plain value is {_TAG: kind, ...}


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _ours(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "agentforge" and "." not in cls.__qualname__


def _allowed(name: str, kind: str) -> type:
    """The agentforge dataclass (kind "object") or enum (kind "enum") `name` ("module:Qualname") names, or refusal."""
    module, _, qualname = name.partition(":")
    found: Any = None
    if module.split(".")[0] == "agentforge" and qualname and "." not in qualname:
        try:
            found = getattr(importlib.import_module(module), qualname, None)
        except ImportError:
            found = None
    wanted = (lambda cls: issubclass(cls, enum.Enum)) if kind == "enum" else dataclasses.is_dataclass
    if isinstance(found, type) and wanted(found):
        return found
    raise UnsafeStateError(f"{name} is not something an agentforge checkpoint holds: the file was not written by "
                           "agentforge or was altered, and was not loaded")


class _Encoder:
    def __init__(self) -> None:
        self.seen: dict[int, int] = {}
        self.keep: list[Any] = []  # holds encoded objects alive so their ids stay unique

    def encode(self, value: Any) -> Any:
        if isinstance(value, enum.Enum) and _ours(type(value)):  # first: a str or int enum is also a str or int
            return {_TAG: "enum", "class": _name(type(value)), "value": self.encode(value.value)}
        if value is None or type(value) in (bool, int, float, str) or isinstance(value, torch.Tensor):
            return value
        for plain in (bool, int, float, str):  # a subclass of one (not an enum): its plain value
            if isinstance(value, plain):
                return plain(value)
        if isinstance(value, (bytes, bytearray)):  # a turn's anchor may be bytes
            return {_TAG: type(value).__name__, "data": torch.tensor(list(value), dtype=torch.uint8)}
        if isinstance(value, (np.generic, np.ndarray)) and value.dtype.kind not in "biufc":
            return self.encode(value.tolist())  # strings or objects in an array: kept as a list
        if isinstance(value, np.generic):
            return {_TAG: "npscalar", "array": torch.from_numpy(np.asarray(value).reshape(1).copy())}
        if isinstance(value, np.ndarray):
            return {_TAG: "ndarray", "array": torch.from_numpy(np.ascontiguousarray(value))}
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        if isinstance(value, (tuple, set, frozenset)):
            return {_TAG: type(value).__name__, "items": [self.encode(v) for v in value]}
        if isinstance(value, dict):
            if all(isinstance(k, str) and k != _TAG for k in value):
                return {k: self.encode(v) for k, v in value.items()}
            return {_TAG: "pairs", "items": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        if dataclasses.is_dataclass(value) and not isinstance(value, type) and _ours(type(value)):
            if id(value) in self.seen:
                return {_TAG: "ref", "id": self.seen[id(value)]}
            self.seen[id(value)] = len(self.seen)
            self.keep.append(value)
            fields = vars(value) if hasattr(value, "__dict__") else \
                {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return {_TAG: "object", "class": _name(type(value)), "id": self.seen[id(value)],
                    "fields": {k: self.encode(v) for k, v in fields.items()}}
        if isinstance(value, PurePath):
            return {_TAG: "path", "value": str(value)}
        # anything else (a third-party object an env put in a turn's info): kept as its text, said once per type
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        if kind not in _TEXT_KEPT:
            _TEXT_KEPT.add(kind)
            log.warning("a %s in the checkpoint's pending batches is kept as its text (repr)", kind)
        return repr(value)


class _Decoder:
    def __init__(self) -> None:
        self.objects: dict[int, Any] = {}

    def decode(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        kind = value.get(_TAG)
        if kind is None:
            return {k: self.decode(v) for k, v in value.items()}
        if kind == "object":
            cls = _allowed(value["class"], kind)
            obj = object.__new__(cls)
            self.objects[int(value["id"])] = obj
            for key, item in value["fields"].items():
                object.__setattr__(obj, key, self.decode(item))
            return obj
        if kind == "ref":
            return self.objects[int(value["id"])]
        if kind == "enum":
            return _allowed(value["class"], kind)(self.decode(value["value"]))
        if kind == "ndarray":
            return value["array"].numpy()
        if kind == "npscalar":
            return value["array"].numpy()[0]
        if kind in ("tuple", "set", "frozenset"):
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[kind](self.decode(v) for v in value["items"])
        if kind in ("bytes", "bytearray"):
            return {"bytes": bytes, "bytearray": bytearray}[kind](value["data"].numpy().tobytes())
        if kind == "path":
            return Path(value["value"])
        if kind == "pairs":
            return {self.decode(k): self.decode(v) for k, v in value["items"]}
        raise UnsafeStateError(f"unknown entry kind {kind!r}: the file was not written by this agentforge")


def save_objects(value: Any, path: Path) -> None:
    """`value` (agentforge dataclasses and plain data) as plain values and tensors, loadable without code."""
    torch.save({"format": FORMAT, "value": _Encoder().encode(value)}, path)


def load_objects(path: Path) -> Any:
    """What `save_objects` wrote; a file naming anything else is refused (UnsafeStateError) and nothing in it runs."""
    stored = load_tensors(path)  # torch's weights_only loader: tensors and plain values only
    if not isinstance(stored, dict) or stored.get("format") != FORMAT:
        raise UnsafeStateError(f"{path} is not a checkpoint state file of this agentforge (format {FORMAT})")
    try:
        return _Decoder().decode(stored["value"])
    except UnsafeStateError as error:
        raise UnsafeStateError(f"{path}: {error}") from None
