"""Shared fixtures. Models are built once into the agentforge cache ($AGENTFORGE_CACHE or ~/.cache/agentforge)
and reused across runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentforge.models import ModelSpec, load_tokenizer, resolve_model

# One training iteration on the tiny fp32 model, in-process envs, an eval after it, no checkpoint: what an
# algorithm's end-to-end wiring test needs (it adds its recipe and its own overrides).
TINY_TRAIN = [
    "model=tiny", "command=train", "logger.wandb=false", "env_pool.kind=local", "model.dtype=float32",
    "engine.dtype=float32", "learner.dtype=float32", "trainer.iterations=1", "trainer.tasks_per_iteration=2",
    "trainer.eval_before=false", "trainer.eval_every=1", "trainer.eval_tasks=2", "trainer.checkpoint_every=0",
    "agent.max_turns=2",
]


@pytest.fixture(scope="session", autouse=True)
def shared_rollout_engine():
    """Runs in this process with the same engine settings share one vLLM engine (agentforge.engines.shared): the
    suite makes dozens of runs, and each used to start an engine of its own. Subprocess runs are unaffected."""
    from agentforge.engines import shared

    shared.enable(True)
    yield
    shared.enable(False)


@pytest.fixture(scope="session")
def tiny_spec() -> ModelSpec:
    """The tiny 2-layer Llama with the SmolLM2 tokenizer, fp32 (built on first use, under a second after that)."""
    return resolve_model({"name": "tiny", "dtype": "float32"})


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_spec: ModelSpec) -> Path:
    """The tiny model's HF folder (config, safetensors, tokenizer): what vLLM and transformers load."""
    return Path(tiny_spec.path)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_spec: ModelSpec) -> Any:
    """The SmolLM2 tokenizer (ChatML template, `<|im_end|>` as EOS and pad)."""
    return load_tokenizer(tiny_spec)


@pytest.fixture
def tiny_train_config(tmp_path: Path) -> Any:
    """`make(recipe, *overrides)`: a one-iteration tiny-model train config (TINY_TRAIN) writing to tmp_path/run."""
    from agentforge.config import compose_config

    def make(recipe: str, *overrides: str) -> Any:
        return compose_config([f"recipe={recipe}", *TINY_TRAIN, *overrides], run_dir=str(tmp_path / "run"))

    return make


@pytest.fixture(scope="module")
def ray_with_module_classes(request: pytest.FixtureRequest) -> Any:
    """A Ray runtime (started here unless one runs) whose actors can load env classes defined in the requesting test
    module: the actors cannot import a test module, so it is shipped by value."""
    import sys

    import ray
    from ray import cloudpickle

    from agentforge.envs.pool import ensure_ray

    module = sys.modules[request.module.__name__]
    cloudpickle.register_pickle_by_value(module)
    started = not ray.is_initialized()
    ensure_ray(num_cpus=2)
    yield
    cloudpickle.unregister_pickle_by_value(module)
    if started:
        ray.shutdown()
