"""Training: the RL loop (rollout → advantages → update → weight sync), the supervised warm start, checkpoints."""
