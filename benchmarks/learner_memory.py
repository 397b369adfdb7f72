"""Learner step memory and time on SmolLM2-135M (LoRA on every linear layer, the Sokoban recipes' setting) per
micro-batch size and memory allocator, each variant in its own process (peak RSS is per process).

    python benchmarks/learner_memory.py [--dtype auto] [--tokens 512 1024 4096] [--allocators glibc tcmalloc]
    python benchmarks/learner_memory.py --tokens 1024 --allocators glibc --critic without with  # + PPO's critic

The batch mimics a Sokoban iteration: 16 episodes x 4 turns, prompts of ~320 tokens (the 4 rollouts of a task share
their first turn's prompt), responses of 30-48 tokens. Two steps per variant; the second step's time is reported.
Writes benchmarks/results/learner_memory.json (with the hardware) and prints one summary line.
"""

from __future__ import annotations

import argparse
import ctypes.util
import os
import subprocess
import sys
import threading
import time

from _report import hand_to_parent, publish, read_child

LORA = {"enabled": True, "rank": 16, "alpha": 32,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}


def sokoban_like_batch() -> list:
    import numpy as np

    from agentforge.learner import TurnSample

    rng = np.random.default_rng(0)
    samples = []
    for _task in range(4):
        shared = rng.integers(0, 49000, 300 + int(rng.integers(0, 40)))
        for _rollout in range(4):
            for turn in range(4):
                prompt = shared if turn == 0 else rng.integers(0, 49000, 300 + int(rng.integers(0, 40)))
                response = rng.integers(0, 49000, 30 + int(rng.integers(0, 18)))
                ids = np.r_[prompt, response]
                samples.append(TurnSample(
                    input_ids=ids, loss_mask=np.r_[np.zeros(len(prompt), bool), np.ones(len(response), bool)],
                    old_logprobs=np.r_[np.zeros(len(prompt), np.float32), np.full(len(response), -1.0, np.float32)],
                    advantage=0.5, prompt_len=len(prompt)))
    return samples


def measure(dtype: str, tokens: int, critic: bool = False) -> dict:
    """One variant, in this process: peak RSS (sampled every 50 ms) and the time of two learner steps (with `critic`,
    PPO's: the learner's critic on, each step followed by its critic step on the same samples)."""
    import psutil

    from agentforge.learner import Learner, LearnerConfig
    from agentforge.models.loading import resolve_model

    spec = resolve_model({"name": "smollm2-135m", "dtype": dtype})
    process = psutil.Process()
    config = LearnerConfig.from_mapping({"dtype": spec.dtype, "lr": 1e-4, "micro_batch_tokens": tokens, "lora": LORA,
                                         "critic": {"enabled": critic}})
    learner = Learner(spec.path, config, in_process=True)
    after_init = process.memory_info().rss
    samples = sokoban_like_batch()
    if critic:
        import numpy as np

        for sample in samples:
            sample.returns = np.where(sample.loss_mask, 1.0, 0.0).astype(np.float32)
            sample.old_values = np.zeros(sample.length, np.float32)
    peak, stop = [after_init], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        metrics = learner.step(samples)
        if critic:
            learner.critic_step(samples)
        times.append(time.perf_counter() - t0)
    stop.set()
    return {"dtype": spec.dtype, "micro_batch_tokens": tokens, "critic": critic, "after_init_gb": after_init / 1e9,
            "peak_rss_gb": peak[0] / 1e9, "step_s": times[-1], "first_step_s": times[0],
            "micro_batches": metrics["micro_batches"], "turn_tokens": sum(s.length for s in samples)}


def run_variant(dtype: str, tokens: int, allocator: str, critic: bool = False) -> dict:
    env = {**os.environ, "AGENTFORGE_PRELOAD": "0"}
    if allocator == "tcmalloc":
        library = ctypes.util.find_library("tcmalloc_minimal")
        if library is None:
            return {"allocator": allocator, "skipped": "libtcmalloc_minimal is not installed"}
        env["LD_PRELOAD"] = library
    out = subprocess.run([sys.executable, __file__, "--one", dtype, str(tokens), str(int(critic))], env=env,
                         capture_output=True, text=True, check=False)
    return {"allocator": allocator, **read_child(out, f"variant {dtype} {tokens} {allocator} critic={critic}")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 1024, 4096])
    parser.add_argument("--allocators", nargs="+", default=["glibc", "tcmalloc"])
    parser.add_argument("--critic", nargs="+", choices=("without", "with"), default=["without"],
                        help="with: PPO's critic on the learner too (its model, optimizer and step)")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        hand_to_parent(measure(args.one[0], int(args.one[1]), bool(int(args.one[2]))))
        return
    from agentforge.hardware import describe

    results = [run_variant(args.dtype, tokens, allocator, critic == "with") for allocator in args.allocators
               for tokens in args.tokens for critic in args.critic]
    done = [r for r in results if "skipped" not in r]
    dtype = done[0]["dtype"] if done else args.dtype
    report = {"config": vars(args), "hardware": describe(dtype), "results": results}
    publish("learner_memory", report,
            f"learner step, SmolLM2 LoRA {dtype} [{report['hardware']['cpu_kind']}]: " + " | ".join(
          f"{r['allocator']} {r['micro_batch_tokens']} tok{' +critic' if r.get('critic') else ''}: "
          f"peak {r['peak_rss_gb']:.1f} GB, {r['step_s']:.0f} s"
          for r in done))


if __name__ == "__main__":
    main()
