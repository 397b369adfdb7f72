"""The default model (SmolLM2-135M-Instruct from the wheel's GGUF) in both engines, fp32."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentforge.engines import make_engine
from agentforge.models import resolve_model
from agentforge.types import SamplingConfig

pytestmark = pytest.mark.e2e

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=32)
QUESTIONS = ["What is 2 + 3?", "Name three colours.", "Write one sentence about the sea."]


@pytest.fixture(scope="module")
def spec():
    return resolve_model({"name": "smollm2-135m", "dtype": "float32"})


@pytest.fixture(scope="module")
def vllm_engine(spec):
    engine = make_engine("vllm", spec, {"kv_cache_space_gb": 1})
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def hf_engine(spec):
    engine = make_engine("hf", spec, {})
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def chat_prompts(hf_engine):
    return [
        hf_engine.tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for q in QUESTIONS
    ]


def test_conversion_is_cached(spec, hf_engine):
    folder = Path(spec.path)
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert resolve_model({"name": "smollm2-135m"}).path == spec.path  # no second conversion
    assert hf_engine.tokenizer.eos_token == "<|im_end|>"
    assert "<|im_start|>" in hf_engine.tokenizer.chat_template
    assert sum(p.numel() for p in hf_engine.model.parameters()) == pytest.approx(134.5e6, rel=0.01)


def test_greedy_parity_and_logprobs(vllm_engine, hf_engine, chat_prompts):
    v_out, h_out = vllm_engine.generate(chat_prompts, GREEDY), hf_engine.generate(chat_prompts, GREEDY)
    for v, h in zip(v_out, h_out, strict=True):
        assert v.token_ids == h.token_ids
        assert v.text == h.text and v.finish_reason == h.finish_reason
        assert max(abs(a - b) for a, b in zip(v.logprobs, h.logprobs, strict=True)) < 1e-3
    assert any(o.finish_reason == "stop" and o.token_ids[-1] == hf_engine.tokenizer.eos_token_id for o in v_out)


@pytest.mark.parametrize("engine_name", ["vllm", "hf"])
def test_answers_two_plus_three(engine_name, vllm_engine, hf_engine, chat_prompts):
    engine = vllm_engine if engine_name == "vllm" else hf_engine
    answer = engine.generate(chat_prompts[:1], GREEDY)[0]
    assert "5" in answer.text, answer.text


def test_weight_push_refreshes_tied_output_layer(vllm_engine, hf_engine, chat_prompts):
    """SmolLM2 ties lm_head to embed_tokens; vLLM's CPU kernel keeps a packed lm_head copy the push must refresh."""
    short = SamplingConfig(temperature=0.0, max_new_tokens=12)
    embed = hf_engine.model.model.embed_tokens.weight.detach().clone()
    noise = torch.randn(embed.shape, generator=torch.Generator().manual_seed(0))
    before = vllm_engine.generate(chat_prompts, short)
    try:
        pushed = [("model.embed_tokens.weight", embed + 0.3 * embed.std() * noise)]
        vllm_engine.update_weights(pushed)
        hf_engine.update_weights(pushed)
        v_out, h_out = vllm_engine.generate(chat_prompts, short), hf_engine.generate(chat_prompts, short)
        assert [o.token_ids for o in v_out] == [o.token_ids for o in h_out]
        assert [o.token_ids for o in v_out] != [o.token_ids for o in before]
    finally:
        vllm_engine.update_weights([("model.embed_tokens.weight", embed)])
        hf_engine.update_weights([("model.embed_tokens.weight", embed)])
    assert [o.token_ids for o in vllm_engine.generate(chat_prompts, short)] == [o.token_ids for o in before]
