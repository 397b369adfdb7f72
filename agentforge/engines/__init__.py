"""Rollout engines: vLLM (in-process on CPU, or GPU) and HF transformers, behind the RolloutEngine protocol.

Engine modules are imported only when chosen: `import vllm` alone takes ~10 s.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from agentforge.errors import AgentforgeError, ConfigError
from agentforge.registry import Registry

ENGINES: Registry[Callable[..., Any]] = Registry("engine")


def _load_vllm_engine() -> type:
    if importlib.util.find_spec("vllm") is None:
        extra = "gpu" if torch.cuda.is_available() else "cpu"
        raise AgentforgeError(f"engine 'vllm' needs vLLM; install it with: pip install 'agentforge[{extra}]'")
    from agentforge.engines.vllm_engine import VLLMEngine

    return VLLMEngine


def _load_hf_engine() -> type:
    from agentforge.engines.hf_engine import HFEngine

    return HFEngine


# name -> loader returning the engine class (loaders keep `import vllm` off the path of users who chose HF)
ENGINES.register("vllm")(_load_vllm_engine)
ENGINES.register("hf")(_load_hf_engine)


def make_engine(name: str, spec: Any, options: Mapping[str, Any] | None = None) -> Any:
    """Build the rollout engine `name` for the resolved model `spec` with the `engine` config group's options.

    `name` may also be a dotted path `pkg.mod:Class` to a class taking `(spec, **options)`.
    """
    entry = ENGINES.get(name)
    cls = entry() if name in ENGINES else entry  # a dotted path names the class itself
    options = {k: v for k, v in dict(options or {}).items() if k != "name"}
    check_options(cls, options, f"engine {name!r}")
    return cls(spec, **options)


def check_options(cls: type, options: Mapping[str, Any], what: str) -> None:
    """Reject unknown keyword options up front, listing the valid ones (a typo must not be silently ignored)."""
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    valid = [
        n for n, p in params.items() if n not in ("self", "spec") and p.kind is not inspect.Parameter.VAR_POSITIONAL
    ]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown} for {what}; valid options: {', '.join(sorted(valid))}")


# ------------------------------------------------------------------------------------------ RNG isolation


def _cuda_devices() -> list[int]:
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


class EngineRng:
    """The engine's own torch RNG stream, swapped in around each generate call.

    Both engines sample with torch's global generator; swapping gives rollouts that are reproducible from the
    engine `seed` alone and leaves the caller's (the trainer's) RNG untouched.
    """

    def __init__(self, seed: int) -> None:
        self._devices = _cuda_devices()
        with torch.random.fork_rng(devices=self._devices):
            torch.manual_seed(seed)
            self._cpu = torch.get_rng_state()
            self._cuda = [torch.cuda.get_rng_state(d) for d in self._devices]

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        saved_cpu = torch.get_rng_state()
        saved_cuda = [torch.cuda.get_rng_state(d) for d in self._devices]
        torch.set_rng_state(self._cpu)
        for d, state in zip(self._devices, self._cuda, strict=True):
            torch.cuda.set_rng_state(state, d)
        try:
            yield
        finally:
            self._cpu = torch.get_rng_state()
            self._cuda = [torch.cuda.get_rng_state(d) for d in self._devices]
            torch.set_rng_state(saved_cpu)
            for d, state in zip(self._devices, saved_cuda, strict=True):
                torch.cuda.set_rng_state(state, d)


@contextlib.contextmanager
def preserved_global_rng() -> Iterator[None]:
    """Restore Python's, NumPy's and torch's global RNG after the block (vLLM's init reseeds them all)."""
    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=_cuda_devices()):
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


__all__ = ["ENGINES", "EngineRng", "check_options", "make_engine", "preserved_global_rng"]


def check_score_inputs(prompts: list[list[int]], responses: list[list[int]], max_model_len: int | None) -> None:
    """`RolloutEngine.score`'s inputs: one non-empty prompt and one non-empty response each, within the context."""
    if len(prompts) != len(responses):
        raise AgentforgeError(f"score got {len(prompts)} prompts and {len(responses)} responses; pass one each")
    for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        if not prompt or not response:
            raise AgentforgeError(f"score pair {i} has an empty prompt or response; both need at least one token")
        if max_model_len is not None and len(prompt) + len(response) > max_model_len:
            raise AgentforgeError(f"score pair {i} has {len(prompt) + len(response)} tokens, over the engine's "
                                  f"max_model_len {max_model_len}: raise engine.max_model_len")
