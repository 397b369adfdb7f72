"""What the objective options cost and what rollout correction fixes, on SmolLM2-135M (bf16, LoRA as the Sokoban
recipes), real vLLM rollouts of 6x6 Sokoban and the real DeepSpeed learner, side by side in one run.

1. Learner update time (ratios to the default): old log-probs from the engine vs recomputed by the learner, and
   ppo_epochs 1 vs 2, each timed `--repeats` times in interleaved order over the same batch of real turns.
2. Engine vs learner on a bf16 run: the mismatch (k3, |Δ log p|), what it does to the first PPO step when the
   engine's log-probs are π_old (the clip acts on noise), and the same batch with `old_logprobs: recompute` and token
   TIS (ratio 1, weights bounded by the threshold).

    python benchmarks/objective_options.py [--tasks 4] [--group 4] [--repeats 3]

Writes benchmarks/results/objective_options.json and prints one summary line. Name the CPU kind when quoting it:
bf16 is emulated, and slow, on CPUs without AMX or AVX512-BF16 (the result records the hardware).
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
from _report import publish

SETTINGS = {
    "engine_1epoch": {},
    "recompute_1epoch": {"old_logprobs": "recompute"},
    "engine_2epochs": {"ppo_epochs": 2, "mini_batch_size": 32},
    "recompute_tis_2epochs": {"old_logprobs": "recompute", "ppo_epochs": 2, "mini_batch_size": 32,
                              "rollout_correction": {"is_level": "token", "is_threshold": 2.0}},
}


def rollout_samples(args: argparse.Namespace):
    """Real turns: the grpo_sokoban recipe's prompts played by SmolLM2 in bf16 vLLM."""
    from agentforge.commands.builders import build_engine, build_model_spec, build_pool, build_rollout_context
    from agentforge.learner.batch import policy_samples
    from agentforge.rollout.multi_turn import MultiTurnWorkflow
    from agentforge.schema.compose import compose_config
    from agentforge.tasks import TaskSampler

    cfg = compose_config(["recipe=grpo_sokoban", "command=train", "env_pool.kind=local", "model.dtype=bfloat16",
                          "logger.wandb=false"], run_dir="/tmp/agentforge-bench-objective")
    spec = build_model_spec(cfg)
    engine = build_engine(cfg, spec)
    pool = build_pool(cfg)
    try:
        ctx = build_rollout_context(cfg, engine, pool)
        tasks = TaskSampler("sokoban", "train", 0).sample(args.tasks)
        groups = MultiTurnWorkflow(None).run(ctx, tasks, args.group).groups
    finally:
        pool.close()
        engine.close()
    samples, _ = policy_samples(groups)
    rng = np.random.default_rng(0)
    for sample in samples:  # a spread of advantages, as GRPO gives
        sample.advantage = float(rng.normal())
    return cfg, spec, samples


def learner_config(cfg, overrides: dict):
    from agentforge.commands.train_checks import learner_config_for_run
    from agentforge.learner import LearnerConfig

    base = learner_config_for_run(cfg).to_dict()
    for key, value in overrides.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) else value
    base["dtype"] = "bfloat16"
    return LearnerConfig.from_mapping(base)


def main() -> None:
    from agentforge.hardware import describe
    from agentforge.learner import Learner

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    t0 = time.perf_counter()
    cfg, spec, samples = rollout_samples(args)
    rollout_s = time.perf_counter() - t0
    learners = {name: Learner(spec.path, learner_config(cfg, o), in_process=True) for name, o in SETTINGS.items()}
    try:
        # ---- 2. mismatch: the same batch, the first optimizer step of each way of taking pi_old
        first = {}
        for name in ("engine_1epoch", "recompute_tis_2epochs"):
            batch = copy.deepcopy(samples)
            prep = learners[name].prepare(batch)
            step = learners[name].step(batch)
            first[name] = {**prep, "first_step_clip_fraction": step["clip_fraction"],
                           "first_step_logprob_mismatch": step["logprob_mismatch"],
                           "first_step_mismatch_max": step["logprob_mismatch_max"]}
            if name == "recompute_tis_2epochs":
                weights = np.concatenate([s.is_weights[s.loss_mask] for s in batch])
                first[name].update({"tis_weight_max": float(weights.max()), "tis_weight_mean": float(weights.mean()),
                                    "tis_ess_fraction": float(weights.sum() ** 2 / (weights ** 2).sum() /
                                                              len(weights))})
        # ---- 1. timing, interleaved, after one warm-up update each
        for learner in learners.values():
            learner.update(copy.deepcopy(samples))
        times: dict[str, list[float]] = {name: [] for name in SETTINGS}
        for _ in range(args.repeats):
            for name, learner in learners.items():
                batch = copy.deepcopy(samples)
                t = time.perf_counter()
                learner.update(batch)
                times[name].append(time.perf_counter() - t)
    finally:
        for learner in learners.values():
            learner.close()
    median = {name: float(np.median(v)) for name, v in times.items()}
    base = median["engine_1epoch"]
    result = {
        "hardware": describe(), "model": spec.name, "dtype": "bfloat16", "lora": True,
        "turns": len(samples), "tokens": int(sum(s.length for s in samples)),
        "loss_tokens": int(sum(s.num_loss_tokens for s in samples)), "rollout_s": rollout_s,
        "update_s": median, "update_ratio": {name: t / base for name, t in median.items()},
        "first_step": first,
    }
    eng, rec = first["engine_1epoch"], first["recompute_tis_2epochs"]
    ratio = result["update_ratio"]
    publish("objective_options", result,
            f"objective_options: {len(samples)} turns · update recompute {ratio['recompute_1epoch']:.2f}x · "
            f"2 epochs {ratio['engine_2epochs']:.2f}x · recompute+TIS+2 epochs "
            f"{ratio['recompute_tis_2epochs']:.2f}x of {base:.1f} s · bf16 mismatch |dlogp| mean "
            f"{rec['rollout/mismatch_abs_mean']:.4f} max {rec['rollout/mismatch_abs_max']:.3f} · first-step clip "
            f"fraction engine {eng['first_step_clip_fraction']:.4f} vs recompute "
            f"{rec['first_step_clip_fraction']:.4f} · "
            f"TIS weight max {rec['tis_weight_max']:.2f} (untruncated {rec['rollout/is_weight_max']:.2f})")


if __name__ == "__main__":
    main()
