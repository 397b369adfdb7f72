"""Learner update time per trained token and memory by sharing mode, on Sokoban-shaped batches with SmolLM2-135M.

    python benchmarks/learner_packing.py [--dtype auto] [--tasks 4] [--group 4] [--turns 4] [--zero-groups 0.5]
                                         [--steps 2] [--variants none prompt prefix prefix_skip] [--profile]

The batch is what a Sokoban iteration trains on: real turn prompts (the recipe's 6x6 rooms, SmolLM2's chat template,
the Sokoban system prompt and rules in every turn) for `tasks` x `group` episodes of up to `turns` random-walk
turns; the rollouts of a task share its first prompt and, where their walks agree, later ones; responses are
30-48 tokens of <think>...</think><action>...</action>. The first `--zero-groups` share of the groups has advantage
exactly 0 for all its turns (every rollout scored the same: GRPO-style groups that all fail early in training).

Variants, each in its own process (peak RSS is per process), the LoRA on every linear layer of the Sokoban recipes:
`none` (every sample alone), `prompt` (identical prompts once: the previous default), `prefix` (prefix trees), and
`prefix_skip` (prefix trees plus skipping zero-advantage samples; the others compute them). One warm-up step, then
`--steps` timed steps; time per trained token is step time / loss tokens of the whole batch. `--profile` adds
torch.profiler's top operators of one `prefix` and one `none` step. Writes benchmarks/results/learner_packing.json
(with the hardware) and prints one line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
LORA = {"enabled": True, "rank": 16, "alpha": 32,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
VARIANTS = {
    "none": {"sharing": "none", "skip_zero_advantage": False},
    "prompt": {"sharing": "prompt", "skip_zero_advantage": False},
    "prefix": {"sharing": "prefix", "skip_zero_advantage": False},
    "prefix_skip": {"sharing": "prefix", "skip_zero_advantage": True},
}
ACTIONS = ("Up", "Down", "Left", "Right")
WORDS = ("the", "box", "is", "left", "of", "me", "target", "push", "it", "up", "down", "right", "wall", "so", "I",
         "move", "first", "then", "next", "to", "reach", "goal", "player", "must", "go", "around")


def sokoban_batch(args: argparse.Namespace, tokenizer) -> list:
    """Turn samples of `tasks` x `group` random-walk Sokoban episodes with real prompts (see the module docstring)."""
    import numpy as np

    from agentforge.agent.prompts import HistoryEntry, prompt_for
    from agentforge.agent.render import AgentConfig, render_turn_prompt
    from agentforge.envs.sokoban import SokobanEnv
    from agentforge.learner import TurnSample
    from agentforge.types import Task

    rng = np.random.default_rng(args.seed)
    template = prompt_for("sokoban")
    agent = AgentConfig(max_turns=args.turns, history_length=0, max_prompt_tokens=512)
    samples = []
    for t in range(args.tasks):
        task = Task("sokoban", 1000 + t)
        zero = t < round(args.zero_groups * args.tasks)
        for _ in range(args.group):
            env = SokobanEnv(dim_room=(6, 6), num_boxes=1, max_steps=6)
            observation = env.reset(task)
            advantage = 0.0 if zero else float(rng.normal())
            history: list[HistoryEntry] = []
            for step in range(1, args.turns + 1):
                prompt = render_turn_prompt(template, tokenizer, agent, observation, history, step, task)
                action = ACTIONS[int(rng.integers(0, 4))]
                words = " ".join(rng.choice(WORDS, int(rng.integers(14, 26))))
                response = tokenizer.encode(f"<think>{words}</think>\n<action>{action}</action><|im_end|>",
                                            add_special_tokens=False)[:48]
                ids = np.r_[np.asarray(prompt, np.int64), np.asarray(response, np.int64)]
                n = len(response)
                samples.append(TurnSample(
                    input_ids=ids, loss_mask=np.r_[np.zeros(len(prompt), bool), np.ones(n, bool)],
                    old_logprobs=np.r_[np.zeros(len(prompt), np.float32), np.full(n, -1.5, np.float32)],
                    advantage=advantage, prompt_len=len(prompt)))
                result = env.step(action)
                history.append(HistoryEntry(observation.text, action))
                observation = result.observation
                if result.done:
                    break
    return samples


def profile_step(learner, samples) -> list[dict]:
    """The top operators (self CPU time) of one optimizer step."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        learner.step(samples)
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:15]
    total = sum(e.self_cpu_time_total for e in prof.key_averages()) or 1
    return [{"op": e.key, "self_cpu_s": e.self_cpu_time_total / 1e6, "share": e.self_cpu_time_total / total,
             "calls": e.count} for e in events]


def measure(variant: str, args: argparse.Namespace) -> dict:
    """One variant, in this process: peak RSS (sampled every 50 ms) and the time of its timed steps."""
    import numpy as np
    import psutil

    from agentforge.learner import Learner, LearnerConfig
    from agentforge.learner.batch import total_loss_tokens
    from agentforge.learner.packing import pack_micro_batches, padding_stats
    from agentforge.models.loading import load_tokenizer, resolve_model

    spec = resolve_model({"name": args.model, "dtype": args.dtype})
    samples = sokoban_batch(args, load_tokenizer(spec))
    settings = VARIANTS[variant]
    config = LearnerConfig.from_mapping({"dtype": spec.dtype, "lr": 1e-5, "micro_batch_tokens": args.micro_batch_tokens,
                                         "lora": LORA, **settings})
    process = psutil.Process()
    learner = Learner(spec.path, config, in_process=True)
    after_init = process.memory_info().rss
    peak, stop = [after_init], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()
    computed = [s for s in samples if s.advantage != 0.0] if config.zero_advantage_skippable() else samples
    packing = padding_stats(computed, pack_micro_batches(computed, args.micro_batch_tokens, settings["sharing"]),
                            settings["sharing"])
    learner.step(samples)  # warm-up
    times, cpu = [], []
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        metrics = learner.step(samples)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    stop.set()
    profile = profile_step(learner, samples) if args.profile and variant in ("none", "prefix") else None
    learner.close()
    step_s = float(np.median(times))
    loss_tokens = total_loss_tokens(samples)
    out = {"variant": variant, **settings, "dtype": spec.dtype, "step_s": step_s, "step_cpu_s": float(np.median(cpu)),
           "ms_per_trained_token": 1e3 * step_s / loss_tokens,
           "cpu_ms_per_trained_token": 1e3 * float(np.median(cpu)) / loss_tokens,  # robust to a busy machine
           "loss_tokens": loss_tokens, "samples": len(samples),
           "zero_advantage_samples": sum(s.advantage == 0.0 for s in samples),
           "micro_batches": metrics["micro_batches"], "loss": metrics["loss"], "grad_norm": metrics["grad_norm"],
           "after_init_gb": after_init / 1e9, "peak_rss_gb": peak[0] / 1e9, "packing": packing}
    if profile is not None:
        out["profile"] = profile
    return out


def run_variant(variant: str, argv: list[str]) -> dict:
    env = {**os.environ, "AGENTFORGE_PRELOAD": "0"}
    out = subprocess.run([sys.executable, __file__, *argv, "--one", variant], env=env, capture_output=True,
                         text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"variant {variant} failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--zero-groups", type=float, default=0.5)
    parser.add_argument("--micro-batch-tokens", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(measure(args.one, args)), flush=True)
        return
    from agentforge.hardware import describe

    argv = [a for a in sys.argv[1:] if a != "--one"]
    started = time.perf_counter()
    results = {v: run_variant(v, argv) for v in args.variants}
    base = results.get("none") or next(iter(results.values()))
    for r in results.values():
        r["speedup_vs_none"] = base["ms_per_trained_token"] / r["ms_per_trained_token"]
        r["cpu_speedup_vs_none"] = base["cpu_ms_per_trained_token"] / r["cpu_ms_per_trained_token"]
        r["peak_rss_vs_none"] = r["peak_rss_gb"] / base["peak_rss_gb"]
    dtype = base["dtype"]
    report = {"config": {k: v for k, v in vars(args).items() if k != "one"}, "hardware": describe(dtype),
              "results": results, "wall_s": time.perf_counter() - started}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "learner_packing.json").write_text(json.dumps(report, indent=2))
    print(f"learner packing, SmolLM2 LoRA {dtype} [{report['hardware']['cpu_kind']}], {base['samples']} turns "
          f"({base['zero_advantage_samples']} at advantage 0), {base['loss_tokens']} trained tokens: " + " | ".join(
              f"{v} {r['ms_per_trained_token']:.1f} ms/tok ({r['speedup_vs_none']:.2f}x wall, "
              f"{r['cpu_speedup_vs_none']:.2f}x CPU, {r['step_s']:.1f} s, "
              f"peak {r['peak_rss_gb']:.2f} GB, computes {r['packing']['row_tokens']:.0f} of "
              f"{base['packing']['sample_tokens']:.0f} tokens)" for v, r in results.items()))


if __name__ == "__main__":
    main()
