"""Which tasks a run plays: the samplers of each split (`sampling.py`) and the held-out sets kept apart by content
(`held_out.py`). The sampling names are re-exported here, where the rest of the package imports them from."""

from agentforge.tasks.sampling import (
    DEFAULT_MEMBERS,
    MIX,
    SPLIT_SEED_BASE,
    TRAIN_STREAM_STRIDE,
    WEIGHT,
    Admit,
    MixedTaskSampler,
    Options,
    TaskSampler,
    iteration_seed,
    mix_members,
    mix_weights,
    stream_start,
    task_envs,
    task_sampler,
)

__all__ = ["DEFAULT_MEMBERS", "MIX", "SPLIT_SEED_BASE", "TRAIN_STREAM_STRIDE", "WEIGHT", "Admit", "MixedTaskSampler",
           "Options", "TaskSampler", "iteration_seed", "mix_members", "mix_weights", "stream_start", "task_envs",
           "task_sampler"]
