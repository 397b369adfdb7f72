"""Generation a weight push can interrupt (`engine.interrupt_tokens`): split into chunks it samples what one call
samples (greedy: the same ids, log-probs, text, also with a stop string completed across a chunk boundary, on the HF
engine and on vLLM); a push made while a replica generates lands between two chunks, and every token keeps the
log-prob of the weights that sampled it (checked by scoring both sides of the switch with each version); through a
Ray-hosted replica the push over the weight group lands inside the call and the completion says where."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from agentforge.engines import make_engine
from agentforge.engines.interventions import InterventionSpec
from agentforge.engines.replicas import ReplicaOptions, ReplicatedEngine
from agentforge.engines.replicas.actor import EngineReplica
from agentforge.engines.replicas.interruptible import can_interrupt, generate_in_chunks
from agentforge.errors import ConfigError
from agentforge.types import SamplingConfig
from tests.integration.test_engine_replicas import perturbed

pytestmark = pytest.mark.integration

HF = {"dtype": "float32", "batch_size": 8}
GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=24)


@pytest.fixture(scope="module")
def prompts(tiny_tokenizer):
    return [tiny_tokenizer.encode(f"The room {i} has a box and", add_special_tokens=False) for i in range(4)]


@pytest.fixture
def one_thread(monkeypatch):
    """EngineReplica sets its process's thread count (OMP_NUM_THREADS too): restored after the test."""
    threads = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", str(threads))
    yield
    torch.set_num_threads(threads)


def chunked(engine, prompts, sampling, chunk):
    return generate_in_chunks(lambda p, s: (0, engine.generate(p, s)), engine.tokenizer, prompts, sampling, chunk,
                              getattr(engine, "max_model_len", None))


def spanning_stop(tokenizer, ids: list[int], text: str) -> str:
    """A stop string made of tokens 2..5 of a response: with chunks of 4 it completes in the second chunk."""
    stop = tokenizer.decode(ids[2:6], skip_special_tokens=True)
    assert stop and text.find(stop) == len(tokenizer.decode(ids[:2], skip_special_tokens=True)), (stop, text)
    return stop


def assert_same(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids and x.text == y.text and x.finish_reason == y.finish_reason
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)


@pytest.mark.parametrize("name", ["hf", "vllm"])
def test_chunks_sample_what_one_call_samples_also_across_a_stop_string(name, tiny_spec, prompts, tiny_tokenizer):
    options = HF if name == "hf" else {"dtype": "float32", "kv_cache_space_gb": 0.25, "max_model_len": 512}
    engine = make_engine(name, tiny_spec, options)
    try:
        whole = engine.generate(prompts, GREEDY)
        assert_same(chunked(engine, prompts, GREEDY, 4), whole)
        assert all(c.policy_version == 0 and c.version_switches == [] for c in chunked(engine, prompts, GREEDY, 5))
        stop = spanning_stop(tiny_tokenizer, whole[0].token_ids, whole[0].text)
        stopping = SamplingConfig(temperature=0.0, max_new_tokens=24, stop=[stop])
        whole_stop = engine.generate(prompts, stopping)
        assert whole_stop[0].finish_reason == "stop" and len(whole_stop[0].token_ids) == 6
        assert_same(chunked(engine, prompts, stopping, 4), whole_stop)
    finally:
        engine.close()


def test_a_call_with_an_intervention_or_a_presence_penalty_is_not_split():
    spec = InterventionSpec("slot_fill", {"prefix": [1], "free": 1, "suffix": [2]})
    assert can_interrupt(GREEDY, [None, None])
    assert not can_interrupt(GREEDY, [None, spec])
    assert not can_interrupt(SamplingConfig(presence_penalty=0.5), None)


def test_a_push_lands_between_chunks_and_each_token_keeps_its_versions_logprob(tiny_spec, prompts, one_thread):
    replica = EngineReplica(0, "hf", tiny_spec, HF, threads=1, interrupt_tokens=4)
    sampling = SamplingConfig(max_new_tokens=64)
    new_weights = perturbed(tiny_spec, 0.9)
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(out=replica.generate(prompts, sampling)))
    worker.start()
    deadline = time.monotonic() + 60
    while replica.generated_tokens < 8 * len(prompts) and time.monotonic() < deadline:  # two chunks in
        time.sleep(0.001)
    replica.update_weights(new_weights, 1)  # waits for the chunk in flight, then goes before the next
    worker.join(timeout=120)
    version, completions = result["out"]
    assert version == 0 and replica.version == 1
    old, new = make_engine("hf", tiny_spec, HF), make_engine("hf", tiny_spec, HF)
    new.update_weights(new_weights)
    try:
        for prompt, c in zip(prompts, completions, strict=True):
            assert c.policy_version == 0 and len(c.version_switches) == 1, c.version_switches
            at, to = c.version_switches[0]
            assert to == 1 and at % 4 == 0 and 8 <= at < len(c.token_ids), (at, len(c.token_ids))
            by_old = old.score([prompt], [c.token_ids])[0]
            by_new = new.score([prompt], [c.token_ids])[0]
            assert c.logprobs[:at] == pytest.approx(by_old[:at], abs=1e-4)  # sampled by version 0
            assert c.logprobs[at:] == pytest.approx(by_new[at:], abs=1e-4)  # by version 1, after the push
            assert max(abs(a - b) for a, b in zip(by_old[at:], by_new[at:], strict=True)) > 1e-3  # they differ
    finally:
        old.close()
        new.close()
        replica.close()


def test_interrupt_tokens_without_replicas_is_refused():
    with pytest.raises(ConfigError, match="engine.interrupt_tokens=8"):
        ReplicaOptions.split({"interrupt_tokens": 8})
    with pytest.raises(ConfigError, match="must be >= 0"):
        ReplicaOptions.split({"replicas": 1, "interrupt_tokens": -1})


def test_a_push_over_the_weight_group_lands_inside_a_replicas_generate_call(tiny_spec, prompts):
    import ray

    from agentforge.hosting.pool import ensure_ray

    ensure_ray(num_cpus=2)
    engine = ReplicatedEngine("hf", tiny_spec, dict(HF), ReplicaOptions(replicas=1, interrupt_tokens=4))
    try:
        engine.reseed(3)
        engine.update_weights(perturbed(tiny_spec, 0.95))  # version 1, and the weight group formed
        result: dict = {}
        worker = threading.Thread(target=lambda: result.update(out=engine.generate(
            prompts, SamplingConfig(max_new_tokens=96), keys=list(range(len(prompts))))))
        worker.start()
        actor = engine.actors[0]
        deadline = time.monotonic() + 120
        while ray.get(actor.chunked_tokens.remote()) < 8 * len(prompts) and time.monotonic() < deadline:
            time.sleep(0.01)  # the threaded actor answers while it generates
        engine.update_weights(perturbed(tiny_spec, 0.9))  # over the weight group (gloo): version 2
        worker.join(timeout=180)
        completions = result["out"]
        assert engine.version == 2
        for c in completions:
            assert c.replica == 0 and c.policy_version == 1
            assert [v for _, v in c.version_switches] == [2] and 8 <= c.version_switches[0][0] < len(c.token_ids)
        after = engine.generate(prompts[:1], SamplingConfig(max_new_tokens=8), keys=[0])
        assert after[0].policy_version == 2 and after[0].version_switches == []
    finally:
        engine.close()
