"""agentforge vs TRL's GRPOTrainer: wall time per training iteration on the same model, batch and task.

    python benchmarks/vs_trl.py [--mode fp32|bf16-lora|both] [--steps 3]

The dtypes are fixed per mode, not `auto`: the comparison is at equal dtype. `--mode bf16-lora` on a CPU without
native bf16 (no AMX or AVX512-BF16) measures torch's bf16 emulation on both sides; the result records the hardware.
Both sides train SmolLM2-135M-Instruct with GRPO on a single-turn Sokoban task (the first move of 8 rooms x 4
completions, 48 new tokens, the same prompt and reward), each in its own process, one after the other. The time of
the steps after the first is averaged. Needs `pip install 'agentforge[bench]'` (trl). Writes
benchmarks/results/vs_trl.json and prints one line per mode with the ratio TRL / agentforge.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import REPO, hand_to_parent, metric_rows, read_child, write_result

PROMPTS, GROUP, NEW_TOKENS = 8, 4, 48
ENV_OPTIONS = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 6}


def single_turn_tasks():
    from agentforge.agent.prompts import prompt_for
    from agentforge.envs.base import make_env
    from agentforge.tasks import TaskSampler

    env = make_env("sokoban", ENV_OPTIONS)
    template = prompt_for("sokoban")
    rows = []
    for task in TaskSampler("sokoban", "train").sample(PROMPTS * 4):
        observation = env.reset(task)
        rows.append({"prompt": template.messages(observation, [], 1), "seed": task.seed})
    return rows


def first_move_reward(seed: int, text: str) -> float:
    """The agent loop's single-turn reward: env reward of the parsed move, minus 0.1 unless the format is strict."""
    from agentforge.agent.parsing import parse_response
    from agentforge.envs.base import make_env
    from agentforge.types import Task

    env = make_env("sokoban", ENV_OPTIONS)
    observation = env.reset(Task("sokoban", seed))
    parsed = parse_response(text, observation.admissible)
    reward = env.step(parsed.action).reward if parsed.action and parsed.admissible else 0.0
    return reward - (0.0 if parsed.valid else 0.1)


def run_trl(mode: str, steps: int) -> list[float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agentforge.models.loading import load_hf_model, load_tokenizer, resolve_model

    spec = resolve_model({"name": "smollm2-135m"})
    bf16 = mode == "bf16-lora"
    model = load_hf_model(spec, "bfloat16" if bf16 else "float32")

    def reward(prompts, completions, seed, **_):
        return [first_move_reward(s, c[0]["content"]) for s, c in zip(seed, completions, strict=True)]

    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *args, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            times.append(time.perf_counter() - self.t0)

    peft_config = None
    if bf16:
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    config = GRPOConfig(
        # 32 completions generated together, trained in 4 micro-batches of 8 (like agentforge's token-budget
        # micro-batches; one batch of 32 peaks above 18 GB here).
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=8, gradient_accumulation_steps=PROMPTS * GROUP // 8,
        num_generations=GROUP,
        max_completion_length=NEW_TOKENS, learning_rate=1e-5, bf16=bf16, use_cpu=True, max_steps=steps,
        gradient_checkpointing=False, beta=0.0, temperature=1.0, report_to="none", logging_steps=1, save_strategy="no",
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, processing_class=load_tokenizer(spec),
                          train_dataset=Dataset.from_list(single_turn_tasks()), peft_config=peft_config,
                          callbacks=[StepTimer()])
    trainer.train()
    return times


def run_agentforge(mode: str, steps: int) -> list[float]:
    from agentforge.commands.train import build_trainer
    from agentforge.schema.compose import compose_config

    run_dir = Path(tempfile.mkdtemp())
    bf16 = mode == "bf16-lora"
    dtype = "bfloat16" if bf16 else "float32"
    cfg = compose_config([
        "command=train", "model=smollm2-135m", f"model.dtype={dtype}", f"learner.dtype={dtype}",
        f"learner.lora.enabled={bf16}", "learner.lr=1e-5", "algorithm=grpo", "env_pool.kind=local",
        "env.dim_room=[6,6]", "env.num_boxes=1", "env.max_steps=6", "agent.max_turns=1", "agent.history_length=0",
        f"agent.sampling.max_new_tokens={NEW_TOKENS}", f"trainer.iterations={steps}",
        f"trainer.tasks_per_iteration={PROMPTS}", f"trainer.group_size={GROUP}", "trainer.eval_before=false",
        "trainer.eval_every=0", "trainer.checkpoint_every=0", "logger.wandb=false",
    ], run_dir=str(run_dir))
    build_trainer(cfg).fit()
    rows = metric_rows(run_dir)
    return [r["time/iteration"] for r in rows if "time/iteration" in r]


def measure(side: str, mode: str, steps: int) -> list[float]:
    """Run one side in a fresh process (no shared caches or threads) and return its per-step seconds."""
    out = subprocess.run([sys.executable, __file__, "--side", side, "--mode", mode, "--steps", str(steps)],
                         capture_output=True, text=True, check=False)
    return read_child(out, f"{side} {mode}", "STEP_TIMES")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="both", choices=["fp32", "bf16-lora", "both"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--side", choices=["trl", "agentforge"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        times = (run_trl if args.side == "trl" else run_agentforge)(args.mode, args.steps)
        hand_to_parent(times, "STEP_TIMES")
        return
    from agentforge.hardware import describe

    modes = ["fp32", "bf16-lora"] if args.mode == "both" else [args.mode]
    hardware = describe(", ".join({"fp32": "float32 (fp32)", "bf16-lora": "bfloat16 (bf16-lora)"}[m] for m in modes))
    report: dict[str, dict] = {"hardware": hardware}
    for mode in modes:
        trl_times = measure("trl", mode, args.steps)
        ours = measure("agentforge", mode, args.steps)
        trl_s, ours_s = statistics.mean(trl_times[1:] or trl_times), statistics.mean(ours[1:] or ours)
        report[mode] = {"trl_seconds_per_step": trl_s, "agentforge_seconds_per_iteration": ours_s,
                        "trl_over_agentforge": trl_s / ours_s, "trl_steps": trl_times, "agentforge_steps": ours}
        print(f"vs_trl {mode} [{hardware['cpu_kind']}]: {PROMPTS}x{GROUP} x {NEW_TOKENS} tokens · "
              f"TRL GRPOTrainer {trl_s:.1f} s/step · "
              f"agentforge {ours_s:.1f} s/iteration · ratio {trl_s / ours_s:.2f}x", flush=True)
    print(f"-> {write_result('vs_trl', report).relative_to(REPO)}")


if __name__ == "__main__":
    main()
