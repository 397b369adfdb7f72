"""Checkpoint state that cannot run code when it is read: a run dir may come from a shared `runs/` folder, and a
plain `pickle.load` of a crafted file there executes whatever it names.

- RNG states: JSON (`rng.json`).
- An algorithm's learned state (tensors, numbers): `torch.save`, read back with `torch.load(weights_only=True)`.
- Asynchronous training's played-but-untrained batches (agentforge's own dataclasses): plain values and tensors
  through the same loader (`reliability/object_state.py`).

DeepSpeed's own checkpoint files are read by DeepSpeed with `torch.load(weights_only=False)` (its optimizer state
holds Python objects): that is contained by resuming only run dirs this user owns (`commands/train_checks.py`).
"""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentforge.errors import AgentforgeError


class UnsafeStateError(AgentforgeError):
    """A checkpoint file names code a checkpoint never holds: it was not written by agentforge (or was altered)."""


def rng_state() -> dict[str, Any]:
    """Python's, numpy's and torch's RNG states as JSON-able values."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(internal), gauss], "numpy": [kind, keys.tolist(), int(pos), int(has_gauss),
                                                                 float(cached)],
            "torch": torch.get_rng_state().tolist()}


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((int(version), tuple(int(v) for v in internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((str(kind), np.asarray(keys, dtype=np.uint32), int(pos), int(has_gauss), float(cached)))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def write_rng(path: Path) -> None:
    path.write_text(json.dumps(rng_state()))


def read_rng(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


NUMPY = "__numpy__"  # a numpy array stored as a tensor (torch's weights_only loader reads tensors, not arrays)


def _to_torch(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {NUMPY: torch.from_numpy(np.ascontiguousarray(value))}
    if isinstance(value, dict):
        return {k: _to_torch(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_torch(v) for v in value)
    return value


def _from_torch(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {NUMPY}:
            return value[NUMPY].numpy()
        return {k: _from_torch(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_from_torch(v) for v in value)
    return value


def save_tensors(state: dict[str, Any], path: Path) -> None:
    """Tensors, numpy arrays and plain values (numbers, strings, lists, dicts)."""
    torch.save(_to_torch(state), path)


def load_tensors(path: Path) -> dict[str, Any]:
    """`torch.load(weights_only=True)`: tensors and plain values only, no code."""
    try:
        return _from_torch(torch.load(path, weights_only=True))
    except pickle.UnpicklingError as error:
        raise UnsafeStateError(f"{path} holds more than tensors and plain values (refused by torch's weights_only "
                               f"loader: {str(error).splitlines()[0]}); it was not written by agentforge") from None
