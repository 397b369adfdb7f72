"""T2PO's decoding cost: vLLM generation throughput with TTI (and per-token uncertainty) on vs off, side by side.

    python benchmarks/t2po_tti.py [--model smollm2-135m] [--batch 32] [--new-tokens 64] [--repeats 3]

One in-process vLLM engine, the same batch of chat prompts, interleaved timed runs (the fastest of each condition
counts: other jobs share the cores): `off` (plain sampling), `uncertainty` (per-token entropy/top-prob recorded,
what TDS needs), `tti` (uncertainty + the ThinkPlateauStop intervention on every request, at settings that never
fire, so the same seed samples the same tokens and only the per-token cost differs); then one batch at the
defaults (min 32 tokens, N 4, ε 0.05) for the firing rate on this model. Target (issue 12): TTI within 10 % of `off`.
Writes benchmarks/results/t2po_tti.json and prints one line.
"""

from __future__ import annotations

import argparse
import time

from _report import publish


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from agentforge.algorithms.t2po import THINK_QUEUE
    from agentforge.engines import make_engine
    from agentforge.engines.interventions import InterventionSpec, register_token_pieces
    from agentforge.hardware import describe
    from agentforge.models import load_tokenizer, resolve_model
    from agentforge.types import SamplingConfig

    spec = resolve_model({"name": args.model})
    tokenizer = load_tokenizer(spec)
    chats = [[{"role": "user", "content": f"Think step by step inside <think></think>, then answer inside "
                                          f"<action></action>: what is {i} times {i + 3}?"}] for i in range(args.batch)]
    prompts = [tokenizer.encode(tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True),
                                add_special_tokens=False) for c in chats]
    engine = make_engine("vllm", spec, {"kv_cache_space_gb": 1, "max_model_len": 1024})
    pieces = register_token_pieces(tokenizer, engine.vocab_size)
    queue = tokenizer.encode(THINK_QUEUE, add_special_tokens=False)

    def tti(min_think_tokens: int, window: int, epsilon: float) -> list[InterventionSpec]:
        return [InterventionSpec("think_plateau_stop", {
            "queue": queue, "vocab_size": engine.vocab_size, "alpha": 0.4, "epsilon": epsilon, "window": window,
            "min_think_tokens": min_think_tokens, "stop_texts": ["</think>", "<action>"], "pieces": pieces})
            for _ in prompts]

    never = args.new_tokens + 1  # watches every token, never fires
    plain = SamplingConfig(temperature=1.0, max_new_tokens=args.new_tokens)
    measured = SamplingConfig(temperature=1.0, max_new_tokens=args.new_tokens, uncertainty=True)
    conditions = {
        "off": (plain, None),
        "uncertainty": (measured, None),
        "tti": (measured, tti(never, 8, 0.01)),
    }
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in conditions}
    try:
        engine.generate(prompts[:2], SamplingConfig(max_new_tokens=4))  # warm-up
        for _ in range(args.repeats):
            for name, (sampling, interventions) in conditions.items():
                engine.reseed(0)
                t0 = time.perf_counter()
                out = engine.generate(prompts, sampling, interventions)
                runs[name].append((time.perf_counter() - t0, sum(len(c.token_ids) for c in out)))
        engine.reseed(0)
        firing = engine.generate(prompts, measured, tti(32, 4, 0.05))
    finally:
        engine.close()
    rates = {name: max(tokens / seconds for seconds, tokens in values) for name, values in runs.items()}
    fired = sum(any(c.forced_mask) for c in firing) / len(firing)
    result = {
        "batch": args.batch, "new_tokens": args.new_tokens, "model": args.model,
        "tokens_per_s": {k: round(v, 2) for k, v in rates.items()},
        "ratio_uncertainty_vs_off": round(rates["uncertainty"] / rates["off"], 3),
        "ratio_tti_vs_off": round(rates["tti"] / rates["off"], 3),
        "runs": runs, "tti_firing_rate_default_settings": fired,
        "hardware": describe(spec.dtype),
    }
    publish("t2po_tti", result,
            f"t2po_tti: batch {args.batch} · off {rates['off']:.1f} tok/s · uncertainty {rates['uncertainty']:.1f} "
            f"({result['ratio_uncertainty_vs_off']:.2f}x) · TTI {rates['tti']:.1f} ({result['ratio_tti_vs_off']:.2f}x, "
            f"target >= 0.90) · fires on {fired:.0%} of responses at the defaults (min 32, N 4, eps 0.05)")


if __name__ == "__main__":
    main()
