"""One rollout engine reused by the runs of one process (`enable()`; the test suite's conftest turns it on).

Why: the suite makes dozens of short training runs, evals and rollouts in one pytest process, and each used to start
its own vLLM engine (import, model load, KV cache, compile checks: seconds each on two cores). A run whose engine
settings equal the previous run's now takes that engine over, with its weights reset from the model's files (a
weight push: what a training run ends with is never seen by the next one), its prefix cache dropped and its
sampling stream reseeded. Anything else starts a fresh engine and closes the old one. Off by default: a real run
owns its engine and closes it at the end.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

_cached: tuple[str, Any] | None = None
_enabled = False  # process-local on purpose: a subprocess (a CLI run a test starts) owns its engine as usual


def enable(on: bool = True) -> None:
    global _enabled
    _enabled = on
    if not on:
        close_shared()


def sharing() -> bool:
    return _enabled


def checkpoint_tensors(model_path: str) -> list[tuple[str, Any]]:
    """The model folder's weights in HF names, as the engine loaded them at start."""
    from safetensors.torch import load_file

    tensors: list[tuple[str, Any]] = []
    for file in sorted(Path(model_path).glob("*.safetensors")):
        tensors += list(load_file(str(file)).items())
    return tensors


class SharedEngine:
    """The cached engine for one run: everything delegates to it, except `close`, which leaves it for the next run."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def close(self) -> None:
        """Kept for the next run (closed when a run needs other settings, or at exit)."""


def shared_engine(name: str, spec: Any, options: dict[str, Any], build: Callable[[], Any]) -> Any:
    """The previous run's engine when the settings match (weights reset to `spec.path`'s), else a new one."""
    global _cached
    key = json.dumps([name, spec.path, spec.dtype, options], sort_keys=True, default=str)
    if _cached is not None and _cached[0] == key:
        engine = _cached[1]
        tensors = checkpoint_tensors(spec.path)
        if tensors:
            engine.update_weights(tensors)
            engine.reseed(int(options.get("seed", 0) or 0))
            return SharedEngine(engine)
    close_shared()
    engine = build()
    _cached = (key, engine)
    return SharedEngine(engine)


def close_shared() -> None:
    """Close the cached engine (before another is started: two vLLM engines do not share one process well)."""
    global _cached
    if _cached is not None:
        _, engine = _cached
        _cached = None
        engine.close()
