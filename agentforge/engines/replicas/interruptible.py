"""Generation that a weight push can interrupt (`engine.interrupt_tokens: N`, for asynchronous training).

A replica's generate call runs in chunks of N tokens: each chunk continues every unfinished response from its prompt
plus the tokens sampled so far, and a push that arrived meanwhile is taken between two chunks (AReaL's interruptible
generation: abort, load the weights, resubmit prompt + partial output; vLLM's offline `LLM.generate` cannot be
aborted, so the replica stops at a chunk boundary instead, at most N tokens late). The KV cache is recomputed after a
push: loading weights drops vLLM's prefix cache (its KV was computed by the old weights), so the continuation
prefills prompt + partial output again with the new ones. Without a push the prefix cache keeps the previous chunk's
KV in whole blocks, and a chunk re-prefills each response's partial last block (up to `engine.block_size` − 1
tokens: measured in benchmarks/interruptible.py).

Every token keeps the log-prob of the weights that sampled it; a response that spans two versions says so in
`Completion.version_switches` (token index, version), its `policy_version` being the oldest.

Not split: calls with a decoding intervention (its state — T2PO's plateau detector, a forced sequence — lives in the
engine's logits processor for one generate call) and calls with a presence penalty (it counts the response's own
tokens, which a continuation would pass as prompt). A stop string completed across a chunk boundary is found on the
decoded response, as the engines do within one call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from agentforge.engines.interventions import InterventionSpec
from agentforge.engines.stops import cut_at_stop
from agentforge.types import Completion, SamplingConfig

RunChunk = Callable[[list[list[int]], SamplingConfig], tuple[int, list[Completion]]]


def can_interrupt(sampling: SamplingConfig, interventions: list[InterventionSpec | None] | None) -> bool:
    """Whether a call samples the same when split into chunks (see the module docstring)."""
    return sampling.presence_penalty == 0 and not any(spec is not None for spec in interventions or [])


@dataclass
class _Response:
    """One response being assembled from chunks."""

    prompt: list[int]
    version: int
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropy: list[float] | None = None
    top_prob: list[float] | None = None
    switches: list[tuple[int, int]] = field(default_factory=list)
    text: str = ""
    finish: str = "length"

    def extend(self, part: Completion) -> None:
        self.ids += part.token_ids
        self.logprobs += part.logprobs
        if part.entropy is not None:
            self.entropy = (self.entropy or []) + part.entropy
            self.top_prob = (self.top_prob or []) + (part.top_prob or [])

    def truncate(self, n: int) -> None:
        self.ids, self.logprobs = self.ids[:n], self.logprobs[:n]
        if self.entropy is not None:
            self.entropy, self.top_prob = self.entropy[:n], (self.top_prob or [])[:n]
        self.switches = [(i, v) for i, v in self.switches if i < n]

    def completion(self) -> Completion:
        return Completion(token_ids=self.ids, logprobs=self.logprobs, text=self.text, finish_reason=self.finish,
                          entropy=self.entropy, top_prob=self.top_prob, policy_version=self.version,
                          version_switches=self.switches)


def generate_in_chunks(run_chunk: RunChunk, tokenizer: object, prompts: list[list[int]], sampling: SamplingConfig,
                       chunk_tokens: int, max_model_len: int | None = None) -> list[Completion]:
    """The completions of `prompts`, generated `chunk_tokens` at a time by `run_chunk(prompts, sampling)`, which
    returns the weight version it ran with (taking a waiting push first) and the chunk's completions."""
    responses = [_Response(list(p), -1) for p in prompts]
    live = list(range(len(prompts)))
    first = True
    while live:
        sofar = len(responses[live[0]].ids)  # every live response has the same length: all chunks ran in full
        step = min(chunk_tokens, sampling.max_new_tokens - sofar)
        version, parts = run_chunk([responses[i].prompt + responses[i].ids for i in live],
                                   replace(sampling, max_new_tokens=step))
        still = []
        for i, part in zip(live, parts, strict=True):
            response = responses[i]
            if first:
                response.version = version
            elif version != (response.switches[-1][1] if response.switches else response.version):
                response.switches.append((sofar, version))
            response.extend(part)
            done = (part.finish_reason != "length" or len(part.token_ids) < step
                    or len(response.ids) >= sampling.max_new_tokens
                    or (max_model_len is not None and len(response.prompt) + len(response.ids) >= max_model_len))
            if first:
                response.text, response.finish = part.text, part.finish_reason
            elif done or sampling.stop:  # decode the whole response: its text, a stop string across the boundary
                ids, response.text, stopped = cut_at_stop(tokenizer, response.ids, sampling.stop)
                response.truncate(len(ids))
                response.finish = "stop" if stopped else part.finish_reason
                done = done or stopped
            if not done:
                still.append(i)
        live, first = still, False
    return [r.completion() for r in responses]
