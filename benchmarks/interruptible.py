"""Interruptible generation (`engine.interrupt_tokens`), measured: what chunking costs when no push comes, and how
long a weight push waits for a replica that is generating, with and without chunks.

    python benchmarks/interruptible.py [--prompts 16] [--tokens 128] [--chunks 16,32,64] [--rounds 2]
                                       [--block-sizes 128,32]

SmolLM2-135M on the vLLM engine inside one `EngineReplica` (the class a Ray replica hosts, built in this process so
nothing else shares the timing), 2 threads, the run's dtype (`auto`). Overhead: the same generate call (fixed seed,
sampling at T = 1, so lengths vary a little with EOS: compared as generated tokens/s) unsplit and in chunks,
alternating, medians over rounds after one untimed warm-up. Push wait: a generate call in a thread, a push of the
model's own weights made a quarter of the way in (by tokens generated, or by time for the unsplit call), timed
from the push call to its return; and the call's total time with that push inside (the KV recomputed after it).
Each measured at two KV-cache block sizes (`engine.block_size`; vLLM's CPU default 128, and 32, the smallest the CPU
backend takes): the prefix cache reuses whole blocks only, so a continuation re-prefills the partial last block of
prompt + output (up to 127 tokens a response at 128). Writes benchmarks/results/interruptible.json and one summary
line.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

from _report import publish

from agentforge.engines.replicas.actor import EngineReplica
from agentforge.engines.shared import checkpoint_tensors
from agentforge.hardware import describe
from agentforge.models.loading import load_tokenizer, resolve_model
from agentforge.types import SamplingConfig

OPTIONS = {"kv_cache_space_gb": 1.0, "max_model_len": 2048}


def prompts_for(tokenizer: Any, n: int) -> list[list[int]]:
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": f"Describe room {i} of a warehouse, box by "
                                                                         "box, in detail."}],
                                           add_generation_prompt=True, tokenize=False) for i in range(n)]
    return [tokenizer.encode(text, add_special_tokens=False) for text in texts]


def timed_generate(replica: EngineReplica, prompts: list[list[int]], sampling: SamplingConfig,
                   chunk: int) -> tuple[float, int]:
    replica.interrupt_tokens = chunk
    replica.reseed(0)
    started = time.perf_counter()
    _, completions = replica.generate(prompts, sampling)
    return time.perf_counter() - started, sum(len(c.token_ids) for c in completions)


def push_inside(replica: EngineReplica, prompts: list[list[int]], sampling: SamplingConfig, chunk: int,
                weights: list, unsplit_seconds: float, version: int) -> dict[str, float]:
    """A push a quarter of the way into a generate call: how long it waited, and the call's time with it."""
    replica.interrupt_tokens = chunk
    replica.reseed(0)
    result: dict[str, Any] = {}
    before = replica.generated_tokens
    target = before + len(prompts) * sampling.max_new_tokens // 4
    started = time.perf_counter()
    worker = threading.Thread(target=lambda: result.update(out=replica.generate(prompts, sampling)))
    worker.start()
    if chunk:
        while replica.generated_tokens < target and worker.is_alive():
            time.sleep(0.005)
    else:
        time.sleep(unsplit_seconds / 4)
    push_at, tokens_at = time.perf_counter(), replica.generated_tokens
    replica.update_weights(weights, version)
    waited = time.perf_counter() - push_at
    chunks_waited = (replica.generated_tokens - tokens_at) / (len(prompts) * chunk) if chunk else 0.0
    worker.join()
    total = time.perf_counter() - started
    _, completions = result["out"]
    switched = sum(1 for c in completions if c.version_switches)
    return {"push_wait_s": waited, "call_s": total, "responses_spanning_versions": float(switched),
            "pushed_after_s": push_at - started, "chunks_run_while_waiting": chunks_waited}


def measure(spec: Any, options: dict[str, Any], prompts: list[list[int]], sampling: SamplingConfig,
            chunks: list[int], weights: list, rounds: int) -> dict[str, Any]:
    """Overhead of each chunk size (alternating, medians) and the push wait unsplit vs the smallest chunk."""
    replica = EngineReplica(0, "vllm", spec, options, threads=2)
    try:
        timed_generate(replica, prompts, sampling, 0)  # warm-up
        runs: dict[int, list[tuple[float, int]]] = {c: [] for c in chunks}
        for r in range(rounds):
            for chunk in chunks if r % 2 == 0 else chunks[::-1]:
                runs[chunk].append(timed_generate(replica, prompts, sampling, chunk))
        overhead = {}
        for chunk, measured in runs.items():
            overhead[str(chunk)] = {"tokens_per_s": statistics.median(t / s for s, t in measured),
                                    "seconds": statistics.median(s for s, _ in measured),
                                    "tokens": statistics.median(t for _, t in measured)}
        for chunk in chunks:
            overhead[str(chunk)]["rate_vs_unsplit"] = overhead[str(chunk)]["tokens_per_s"] / overhead["0"][
                "tokens_per_s"]
        unsplit = overhead["0"]["seconds"]
        pushes = {str(chunk): push_inside(replica, prompts, sampling, chunk, weights, unsplit, i + 1)
                  for i, chunk in enumerate([0, chunks[1]])}
    finally:
        replica.close()
    return {"overhead": overhead, "push": pushes}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--chunks", default="16,32,64")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--block-sizes", default="128,32")
    args = parser.parse_args()
    chunks = [0, *[int(c) for c in args.chunks.split(",")]]
    spec = resolve_model({"name": "smollm2-135m"})
    tokenizer = load_tokenizer(spec)
    prompts = prompts_for(tokenizer, args.prompts)
    sampling = SamplingConfig(max_new_tokens=args.tokens)
    weights = list(checkpoint_tensors(spec.path))
    by_block = {}
    for block in [int(b) for b in args.block_sizes.split(",")]:
        by_block[str(block)] = measure(spec, {**OPTIONS, "block_size": block}, prompts, sampling, chunks, weights,
                                       args.rounds)
    out = {"machine": describe(spec.dtype), "threads": 2, "prompts": args.prompts, "max_new_tokens": args.tokens,
           "rounds": args.rounds, "block_sizes": by_block}
    parts = []
    for block, result in by_block.items():
        rates = ", ".join(f"{c}: {result['overhead'][str(c)]['rate_vs_unsplit']:.2f}x" for c in chunks[1:])
        push = result["push"]
        parts.append(f"block {block}: tokens/s of chunks vs unsplit {rates}; push wait "
                     f"{push['0']['push_wait_s']:.2f} s unsplit vs {push[str(chunks[1])]['push_wait_s']:.2f} s "
                     f"(chunk {chunks[1]})")
    line = "; ".join(parts)
    publish("interruptible", out, f"interruptible: {line}")


if __name__ == "__main__":
    main()
