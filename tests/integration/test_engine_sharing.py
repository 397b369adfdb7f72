"""The suite's shared in-process vLLM engine (agentforge.engines.shared) next to an engine a test builds itself."""

from __future__ import annotations

import pytest

from agentforge.commands.builders import build_engine, build_model_spec
from agentforge.engines import make_engine
from agentforge.schema.compose import compose_config
from agentforge.types import SamplingConfig

pytestmark = pytest.mark.integration

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=6)


def test_a_directly_built_engine_closed_leaves_the_next_shared_run_working():
    """Closing an in-process vLLM engine tears down vLLM's process-wide parallel state; a shared engine cached
    before it then failed its next run (`pipeline model parallel group is not initialized`), which under
    pytest-xdist depended on which files a worker happened to run before. A direct build now closes the shared
    engine first, and the next shared run starts a fresh one."""
    cfg = compose_config(["model=tiny", "engine=vllm", "engine.kv_cache_space_gb=0.25"])
    spec = build_model_spec(cfg)
    prompt = [[1, 2, 3, 4]]
    first = build_engine(cfg, spec).generate(prompt, GREEDY)[0].token_ids
    direct = make_engine("vllm", spec, {"dtype": spec.dtype, "kv_cache_space_gb": 0.25})
    try:
        assert direct.generate(prompt, GREEDY)[0].token_ids == first
    finally:
        direct.close()
    assert build_engine(cfg, spec).generate(prompt, GREEDY)[0].token_ids == first
