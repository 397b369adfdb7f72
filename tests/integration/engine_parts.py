"""What the two engine test modules (test_engines.py, test_engine_uncertainty.py) share: the prompts (four lengths,
one over 100 tokens) and the fp32 transformers engine they compare vLLM against. Import the fixtures by name into
the module that uses them; each module still gets its own engine (module scope)."""

from __future__ import annotations

import pytest

from agentforge.engines import make_engine

TEXTS = [
    "x",
    "1 2 3",
    "Hello there, how are you today?",
    "The quick brown fox jumps over the lazy dog. " * 12,
]


@pytest.fixture(scope="module")
def hf_engine(tiny_spec):
    engine = make_engine("hf", tiny_spec, {"dtype": "float32", "batch_size": 3})
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def prompts(tiny_tokenizer):
    return [tiny_tokenizer.encode(t) for t in TEXTS]
