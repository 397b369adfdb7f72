"""Where one training iteration's time goes (rollout, advantages, update, sync) and the learner's tokens/s.

    python benchmarks/train_step.py [--recipe gigpo_sokoban] [--iterations 2] [override ...]

Runs a real short training (no warm start, no eval), reports the last iteration, writes
benchmarks/results/train_step.json (with the hardware and the dtypes the recipe resolved to; `auto` is bf16 where
the CPU computes it natively, else fp32) and prints one line.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _report import metric_rows, publish

from agentforge.commands.train import build_trainer
from agentforge.hardware import describe
from agentforge.schema.compose import compose_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="gigpo_sokoban")
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides")
    args = parser.parse_args()
    run_dir = Path(tempfile.mkdtemp(prefix="agentforge-bench-"))
    cfg = compose_config([
        f"recipe={args.recipe}", "command=train", f"trainer.iterations={args.iterations}", "trainer.warm_start=false",
        "trainer.eval_before=false", "trainer.eval_every=0", "trainer.checkpoint_every=0", "logger.wandb=false",
        "env_pool.kind=local", *args.overrides,
    ], run_dir=str(run_dir))
    build_trainer(cfg).fit()
    rows = metric_rows(run_dir)
    last = rows[-1]
    split = {k.removeprefix("time/"): last[k] for k in
             ("time/rollout", "time/advantages", "time/update", "time/sync", "time/iteration")}
    dtypes = {group: str(cfg[group].dtype) for group in ("model", "engine", "learner")}
    report = {
        "recipe": args.recipe, "overrides": args.overrides, "hardware": describe(dtypes["learner"]), "dtypes": dtypes,
        "seconds": split,
        "learner_tokens_per_s": last["train/input_tokens"] / last["time/update"],
        "learner_input_tokens": last["train/input_tokens"], "loss_tokens": last["train/tokens"],
        "generated_tokens_per_s": last["train/generated_tokens_per_s"], "samples": last["train/samples"],
    }
    shares = " ".join(f"{k} {v:.2f}s" for k, v in split.items())
    publish("train_step", report,
            f"train_step {args.recipe} {dtypes['learner']} [{report['hardware']['cpu_kind']}]: {shares} | "
            f"learner {report['learner_tokens_per_s']:.0f} tok/s "
            f"({report['learner_input_tokens']} tokens, {report['samples']} turn samples)")


if __name__ == "__main__":
    main()
