"""How a learner rank's process and DeepSpeed are set up: the distributed variables, DeepSpeed's cached groups
after the world is made again, the LR schedule and the DeepSpeed config. Kept apart from the rank's training
(deepspeed_learner.py) because they run once, at the rank's start; tested through the learner tests that start ranks."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import torch

from agentforge.engines.replicas.weight_group import free_port
from agentforge.learner.config import LearnerConfig


def prepare_process_env(rank: int, world_size: int, master_addr: str, master_port: int | None,
                        local_rank: int | None = None) -> None:
    """The variables torch.distributed and DeepSpeed read, set before DeepSpeed is imported in this process."""
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # Another part of this process (an earlier rank object, vLLM's in-process engine) made the world;
        # DeepSpeed joins it but still reads these variables.
        os.environ.setdefault("RANK", str(torch.distributed.get_rank()))
        os.environ.setdefault("WORLD_SIZE", str(torch.distributed.get_world_size()))
        os.environ.setdefault("LOCAL_RANK", str(rank if local_rank is None else local_rank))
        return
    os.environ.update({
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port or free_port()),
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank if local_rank is None else local_rank),
    })


def forget_stale_deepspeed_groups() -> None:
    """DeepSpeed caches process groups (a clone of the world group) in module globals. When the world is torn
    down and made again in one process (vLLM's in-process engine does so on close and restart, e.g. a trainer
    resumed in the same process), those groups are dead and `deepspeed.initialize` fails with "Group ... is not
    registered": drop every cached group the current world does not know."""
    from deepspeed.utils import groups
    from torch.distributed import distributed_c10d

    registered = distributed_c10d._world.pg_group_ranks
    for name, value in list(vars(groups).items()):
        if isinstance(value, torch.distributed.ProcessGroup) and value not in registered:
            setattr(groups, name, None)


def lr_factor(config: LearnerConfig) -> Callable[[int], float]:
    """LR multiplier per optimizer step: linear warmup from 1/(warmup+1) (the first step is not wasted at lr 0),
    then constant, cosine or linear decay to 0 at `total_steps`."""
    warmup, total, schedule = config.warmup_steps, config.total_steps, config.lr_schedule

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, (total or 0) - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress)) if schedule == "cosine" else 1.0 - progress

    return factor


def effective_zero_stage(config: LearnerConfig) -> int:
    """The ZeRO stage DeepSpeed runs: bf16 at stage 0 becomes stage 1, the only stage-0/1 path where DeepSpeed
    accumulates bf16 gradients in fp32 (its BF16 optimizer; nothing is partitioned on one rank)."""
    return 1 if config.dtype == "bfloat16" and config.zero_stage == 0 else config.zero_stage


def deepspeed_config(config: LearnerConfig, world_size: int) -> dict[str, Any]:
    stage = effective_zero_stage(config)
    zero: dict[str, Any] = {
        "stage": stage,
        "reduce_bucket_size": int(config.reduce_bucket_size),
        "allgather_bucket_size": int(config.allgather_bucket_size),
    }
    if stage == 3:
        zero["stage3_prefetch_bucket_size"] = int(config.allgather_bucket_size)
    bf16 = config.dtype == "bfloat16"
    return {
        # Nominal sizes: the real accumulation boundary is set per micro-batch by the learner.
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "train_batch_size": world_size,
        "gradient_clipping": float(config.grad_clip),
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        # fp32 gradient accumulation (and so fp32 master weights and optimizer state) whenever the model is bf16:
        # bf16 accumulation of 8 identical micro-batches was 0.39 % off, fp32's is exact. The 1.2-1.3 % between
        # packings of one batch remains: bf16 compute, not accumulation (docs/objectives.md "bf16")
        **({"data_types": {"grad_accum_dtype": "fp32"}} if bf16 else {}),
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
