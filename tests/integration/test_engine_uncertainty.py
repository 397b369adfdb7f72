"""Per-token uncertainty (entropy, top probability) from both rollout engines on the tiny fp32 model.

Tolerance: entropy within ENTROPY_ATOL = 1e-3 nats and top probability within a relative TOP_PROB_RTOL = 1e-3,
between vLLM and transformers and against a plain forward pass. Both engines compute the values in fp32 from
fp32 logits that differ only by kernel rounding (vLLM's CPU matmul/attention kernels vs torch's): measured gaps
are ~5e-6 nats and ~5e-6 relative, the same order as the sampled log-probs (checked at 1e-3 in test_engines.py).
A small logit error ε moves the log top probability by at most 2ε and the entropy by a few ε, so 1e-3 leaves
headroom for other CPUs while staying far below what a wrong source would give: temperature 0.5 moves the
entropy by ~3 nats here, top-k 5 caps it at log 5 ≈ 1.6 (raw: ~9.5), forcing would give top probability 1.

Mixed batches: `SamplingConfig` is per `generate` call, so one engine call either records every request or none.
Requests that ask and requests that do not still share vLLM's persistent batch (rows are reused and moved as
requests finish), so that per-request bookkeeping is tested on the real `VLLMInterventionProcessor` with vLLM's
own `BatchUpdate` records; at the engine level, calls with and without uncertainty alternate on one engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
import torch

from agentforge.engines import make_engine
from agentforge.engines.interventions import (
    EXTRA_ARGS_KEY,
    INTERVENTIONS,
    DecodingHooks,
    ForceSequence,
    Intervention,
    InterventionSpec,
    UncertaintyRecord,
    next_token_uncertainty,
    register_active,
    release_active,
)
from agentforge.errors import AgentforgeError
from agentforge.types import Completion, SamplingConfig
from tests.integration import engine_parts

pytestmark = pytest.mark.integration
hf_engine, prompts = engine_parts.hf_engine, engine_parts.prompts  # the shared fixtures

ENTROPY_ATOL = 1e-3
TOP_PROB_RTOL = 1e-3
GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=16)
GREEDY_U = SamplingConfig(temperature=0.0, max_new_tokens=16, uncertainty=True)


@INTERVENTIONS.register("test_force_when_confident")
class ForceWhenConfident(Intervention):
    """Force `token` at the first step whose raw top probability exceeds `above`: a T2PO-style trigger that reads
    the step's uncertainty through `current_uncertainty` (batched by the adapters: `wants_uncertainty`)."""

    kind = "test_force_when_confident"
    wants_uncertainty = True

    def __init__(self, token: int, above: float) -> None:
        super().__init__()
        self.token = token
        self.above = above
        self.fired_at: int | None = None
        self.seen: dict[int, tuple[float, float]] = {}

    def forced_token(self, output_ids: Sequence[int], logits: torch.Tensor) -> int | None:
        n = len(output_ids)
        self.seen[n] = self.current_uncertainty(logits)
        if self.fired_at is None or self.fired_at == n:  # a repeated call for a position decides again
            self.fired_at = n if self.seen[n][1] > self.above else None
        return self.token if self.fired_at == n else None


@pytest.fixture(scope="module")
def vllm_engine(tiny_spec):
    """A small step budget (512 tokens), so a batch of long prompts has its prefills split across steps."""
    options = {"dtype": "float32", "kv_cache_space_gb": 1, "max_model_len": 512, "max_num_batched_tokens": 512}
    engine = make_engine("vllm", tiny_spec, options)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def engines(vllm_engine, hf_engine):
    return {"vllm": vllm_engine, "hf": hf_engine}


@pytest.fixture(scope="module")
def greedy(engines, prompts):
    """Greedy completions with uncertainty from each engine (computed once for the module)."""
    return {name: engine.generate(prompts, GREEDY_U) for name, engine in engines.items()}


def forward_uncertainty(model, prompt: list[int], completion: Completion) -> tuple[torch.Tensor, torch.Tensor]:
    """Entropy and top probability of each generated position, recomputed from one plain forward pass over
    prompt + response with a direct log-softmax (not the engines' helper)."""
    ids = torch.tensor([prompt + completion.token_ids])
    with torch.no_grad():
        logprobs = model(ids).logits[0, len(prompt) - 1 : -1].double().log_softmax(-1)
    probs = logprobs.exp()
    return -(probs * logprobs).sum(-1), probs.max(-1).values


def assert_matches(completion: Completion, entropy: Sequence[float] | torch.Tensor, top_prob, what: str) -> None:
    got_h = torch.tensor(completion.entropy, dtype=torch.float64)
    got_p = torch.tensor(completion.top_prob, dtype=torch.float64)
    want_h = torch.as_tensor(entropy, dtype=torch.float64)
    want_p = torch.as_tensor(top_prob, dtype=torch.float64)
    assert got_h.shape == want_h.shape == got_p.shape == want_p.shape == (len(completion.token_ids),), what
    assert torch.allclose(got_h, want_h, rtol=0, atol=ENTROPY_ATOL), f"{what}: entropy {got_h} vs {want_h}"
    assert torch.allclose(got_p, want_p, rtol=TOP_PROB_RTOL, atol=0), f"{what}: top_prob {got_p} vs {want_p}"


def test_helper_edge_cases():
    """Masked (-inf) entries count as probability 0; a one-hot row has entropy 0 and top probability 1."""
    logits = torch.tensor([[0.0, 0.0, float("-inf"), 0.0], [float("-inf"), 5.0, float("-inf"), float("-inf")]])
    entropy, top_prob = next_token_uncertainty(logits)
    assert torch.allclose(entropy, torch.tensor([math.log(3), 0.0]))
    assert torch.allclose(top_prob, torch.tensor([1 / 3, 1.0]))
    single_h, single_p = next_token_uncertainty(logits[0])  # one row, as an intervention sees it
    assert single_h.shape == () and math.isclose(float(single_h), math.log(3), rel_tol=1e-6)
    assert math.isclose(float(single_p), 1 / 3, rel_tol=1e-6)


@pytest.mark.parametrize("name", ["vllm", "hf"])
def test_off_by_default_and_sampling_unchanged(name, engines, prompts, greedy):
    """Off: both fields are None. On: one value per token, and the same tokens and log-probs as off (recording
    never changes what is sampled). Alternating calls on one engine also show per-call state does not leak."""
    assert SamplingConfig().uncertainty is False
    off = engines[name].generate(prompts, GREEDY)
    for out_off, out_on in zip(off, greedy[name], strict=True):
        assert out_off.entropy is None and out_off.top_prob is None
        assert out_on.token_ids == out_off.token_ids and out_on.logprobs == pytest.approx(out_off.logprobs, abs=1e-6)
        assert len(out_on.entropy) == len(out_on.top_prob) == len(out_on.token_ids) == GREEDY.max_new_tokens
    again = engines[name].generate(prompts, GREEDY_U)
    for out_again, out_on in zip(again, greedy[name], strict=True):
        assert out_again.entropy == pytest.approx(out_on.entropy, abs=1e-6)


def test_vllm_and_hf_agree(prompts, greedy):
    for row, (v, h) in enumerate(zip(greedy["vllm"], greedy["hf"], strict=True)):
        assert v.token_ids == h.token_ids
        assert_matches(v, h.entropy, h.top_prob, f"prompt {row} ({len(prompts[row])} tokens)")


@pytest.mark.parametrize("name", ["vllm", "hf"])
def test_values_match_a_forward_pass(name, hf_engine, prompts, greedy):
    for row, (prompt, out) in enumerate(zip(prompts, greedy[name], strict=True)):
        entropy, top_prob = forward_uncertainty(hf_engine.model, prompt, out)
        assert_matches(out, entropy, top_prob, f"{name} prompt {row}")
        assert all(0 < h <= math.log(hf_engine.model.config.vocab_size) for h in out.entropy)
        # greedy: the sampled token is the top one, so its probability is the top probability
        assert out.top_prob == pytest.approx([math.exp(lp) for lp in out.logprobs], rel=TOP_PROB_RTOL)


def test_forced_tokens_report_the_raw_distribution(engines, hf_engine, tiny_tokenizer, prompts, greedy):
    """A forced token's entry describes the model's distribution at that position, not the forced one-hot."""
    sequence = tiny_tokenizer.encode("</think>\n<action>", add_special_tokens=False)
    specs = [
        InterventionSpec("force_sequence", {"sequence": sequence, "after_tokens": 2}),
        None,
        InterventionSpec("force_sequence", {"sequence": sequence, "after_tokens": 0}),
        None,
    ]
    outs = {name: engine.generate(prompts, GREEDY_U, specs) for name, engine in engines.items()}
    for name, completions in outs.items():
        for row, (prompt, out) in enumerate(zip(prompts, completions, strict=True)):
            if specs[row] is None:  # rows without an intervention in the same batch are recorded as usual
                assert out.token_ids == greedy[name][row].token_ids and not any(out.forced_mask)
                assert_matches(out, greedy[name][row].entropy, greedy[name][row].top_prob, f"{name} row {row}")
                continue
            assert sum(out.forced_mask) == len(sequence)
            entropy, top_prob = forward_uncertainty(hf_engine.model, prompt, out)
            assert_matches(out, entropy, top_prob, f"{name} forced row {row}")
            for i in (i for i, forced in enumerate(out.forced_mask) if forced):
                assert out.top_prob[i] < 0.5 and out.entropy[i] > 1.0, (name, row, i)
    for v, h in zip(outs["vllm"], outs["hf"], strict=True):
        assert v.token_ids == h.token_ids
        assert_matches(v, h.entropy, h.top_prob, "forced, vLLM vs HF")


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingConfig(temperature=1.0, max_new_tokens=12, uncertainty=True),
        SamplingConfig(
            temperature=1.0, top_k=5, top_p=0.9, repetition_penalty=1.3, max_new_tokens=12, uncertainty=True
        ),
        SamplingConfig(temperature=0.5, presence_penalty=1.0, max_new_tokens=12, uncertainty=True),
    ],
    ids=["t1", "t1-topk5-topp-rep", "t0.5-presence"],
)
@pytest.mark.parametrize("name", ["vllm", "hf"])
def test_sampling_reports_raw_values(name, sampling, engines, hf_engine, prompts):
    """Sampled completions: values equal the raw forward pass whatever temperature, top-k/p or penalties did."""
    outs = engines[name].generate(prompts, sampling)
    for row, (prompt, out) in enumerate(zip(prompts, outs, strict=True)):
        entropy, top_prob = forward_uncertainty(hf_engine.model, prompt, out)
        assert_matches(out, entropy, top_prob, f"{name} prompt {row}")
        if sampling.top_k == 5:  # entropy after top-k 5 would be at most log 5
            assert min(out.entropy) > math.log(5) + 1
        if sampling.temperature == 0.5:  # the tempered distribution is much sharper than the raw one
            tempered, _ = next_token_uncertainty(
                hf_engine.model(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1 : -1].detach() / 0.5
            )
            assert (torch.tensor(out.entropy) - tempered).min() > 1.0


def test_partial_prefill_keeps_the_final_values(vllm_engine, hf_engine, tiny_tokenizer):
    """Six 145-token prompts are 870 prefill tokens against a 512-token step budget, so vLLM splits a prefill over
    two steps; the processor also sees the unfinished one (its output still empty, its sample discarded). The record
    for output position 0 must be the final evaluation's, i.e. match the forward pass."""
    prompts = [
        tiny_tokenizer.encode(f"Story {i}: " + "The quick brown fox jumps over the lazy dog. " * 14) for i in range(6)
    ]
    assert sum(len(p) for p in prompts) > 512 and max(len(p) for p in prompts) < 512
    for row, (prompt, out) in enumerate(zip(prompts, vllm_engine.generate(prompts, GREEDY_U), strict=True)):
        entropy, top_prob = forward_uncertainty(hf_engine.model, prompt, out)
        assert_matches(out, entropy, top_prob, f"long prompt {row}")


def confident_trigger(completion: Completion, token: int) -> tuple[int, float]:
    """Where a `ForceWhenConfident(token, above)` fires on this greedy completion, with an `above` half-way
    between a new running maximum of top_prob and the previous one (a margin far above the engines' gap)."""
    best = None
    for k in range(1, len(completion.top_prob)):
        previous = max(completion.top_prob[:k])
        margin = completion.top_prob[k] - previous
        if completion.token_ids[k] != token and (best is None or margin > best[2]):
            best = (k, previous + margin / 2, margin)
    assert best is not None and best[2] / completion.top_prob[best[0]] > 0.01, "no usable trigger position"
    return best[0], best[1]


def test_intervention_reads_current_uncertainty(engines, tiny_tokenizer, prompts, greedy):
    """An intervention that decides from the step's top probability fires at the same position in both engines:
    the value it reads is the one the engines record."""
    token = tiny_tokenizer.encode("!", add_special_tokens=False)[0]
    triggers = [confident_trigger(out, token) for out in greedy["hf"]]
    specs = [InterventionSpec("test_force_when_confident", {"token": token, "above": above}) for _, above in triggers]
    for name, engine in engines.items():
        for row, out in enumerate(engine.generate(prompts, GREEDY, specs)):
            at = triggers[row][0]
            assert out.token_ids[:at] == greedy[name][row].token_ids[:at]
            assert out.token_ids[at] == token and out.forced_mask == [i == at for i in range(len(out.token_ids))]
            assert out.entropy is None  # reading uncertainty inside an intervention does not turn recording on


def test_processor_mixed_batch():
    """vLLM's processor with requests that ask for uncertainty, for an intervention, for both, or for nothing,
    through the persistent-batch updates vLLM sends: repeats overwrite, reused and moved rows follow requests."""
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from agentforge.engines.vllm_engine import VLLMInterventionProcessor

    gen = torch.Generator().manual_seed(0)
    vocab = 50
    record_a, record_c = UncertaintyRecord(), UncertaintyRecord()
    probe = ForceWhenConfident(token=0, above=2.0)  # reads uncertainty, never fires
    hooks = {
        "a": DecodingHooks(None, record_a),  # uncertainty only
        "b": DecodingHooks(ForceSequence([3], after_tokens=0), None),  # intervention only
        "c": DecodingHooks(probe, record_c),  # both
    }
    keys = {name: register_active(h) for name, h in hooks.items()}
    outputs = {"a": [5, 6], "b": [], "c": [], "d": []}

    def params(name: str) -> SamplingParams:
        return SamplingParams(extra_args={EXTRA_ARGS_KEY: keys[name]}) if name in keys else SamplingParams()

    def update(size: int, removed=(), added=(), moved=()) -> None:
        added = [(row, params(name), [1], outputs[name]) for row, name in added]
        processor.update_state(BatchUpdate(batch_size=size, removed=list(removed), added=added, moved=list(moved)))

    def step(size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        logits = torch.randn(size, vocab, generator=gen) * 3
        entropy, top_prob = next_token_uncertainty(logits)
        return logits, processor.apply(logits.clone()), entropy.tolist(), top_prob.tolist()

    try:
        processor = VLLMInterventionProcessor(None, torch.device("cpu"), False)
        update(4, added=[(0, "a"), (1, "b"), (2, "c"), (3, "d")])
        logits, out, entropy, top_prob = step(4)
        assert record_a.values == {2: pytest.approx((entropy[0], top_prob[0]))}
        assert record_c.values == {0: pytest.approx((entropy[2], top_prob[2]))}
        assert probe.seen == {0: pytest.approx((entropy[2], top_prob[2]))}  # the batched values, passed through
        assert out[1].argmax() == 3 and torch.isinf(out[1]).sum() == vocab - 1  # b forced, unrecorded
        assert torch.equal(out[[0, 2, 3]], logits[[0, 2, 3]])  # recording never touches the logits

        _, _, entropy, top_prob = step(4)  # the same positions again (a discarded partial prefill): overwrite
        assert record_a.values == {2: pytest.approx((entropy[0], top_prob[0]))}
        assert list(record_c.values) == [0]

        outputs["a"].append(7)
        outputs["c"].append(9)
        update(4, moved=[(1, 2, MoveDirectionality.SWAP)])  # c now at row 1, b at row 2
        _, out, entropy, top_prob = step(4)
        assert record_a.values[3] == pytest.approx((entropy[0], top_prob[0]))
        assert record_c.values[1] == pytest.approx((entropy[1], top_prob[1]))
        assert out[2].argmax() == 3

        # a finishes; a request without hooks reuses its row and is not recorded, nor does it disturb a's record
        update(4, removed=[0], added=[(0, "d")])
        before = dict(record_a.values)
        step(4)
        assert record_a.values == before and set(processor.rows) == {1, 2}

        # c moves down to row 0 as the others finish: the every-row fast path (no row gather)
        outputs["c"].append(4)
        update(1, removed=[2, 3], moved=[(1, 0, MoveDirectionality.UNIDIRECTIONAL)])
        _, _, entropy, top_prob = step(1)
        assert set(processor.rows) == {0} and record_c.values[2] == pytest.approx((entropy[0], top_prob[0]))
        assert record_c.lists(3)[0] == [record_c.values[i][0] for i in range(3)]
        with pytest.raises(AgentforgeError, match="no uncertainty was recorded"):
            record_c.lists(4)

        update(0, removed=[0])
        idle = torch.randn(2, vocab, generator=gen)
        assert processor.apply(idle) is idle  # nobody asked: nothing computed
    finally:
        for key in keys.values():
            release_active(key)


def test_multiprocess_engine_refuses_uncertainty(vllm_engine, prompts):
    """A multiprocess engine has no side channel to the processor: asking must fail up front, naming the fix.

    The guard runs before any engine work, so it is checked on the in-process engine with its mode flag flipped
    (a real multiprocess engine needs `__main__` and a spawned core, ~1 min here).
    """
    vllm_engine.in_process = False
    try:
        with pytest.raises(AgentforgeError, match="in_process=True"):
            vllm_engine.generate(prompts, GREEDY_U)
    finally:
        vllm_engine.in_process = True
