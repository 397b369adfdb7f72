"""On-policy distillation's per-token advantage: the teacher's log-prob of the token the student sampled minus the
student's, A_t = log π_T(y_t | ·) − log π_S(y_t | ·) = −(the one-sample estimate of the reverse KL KL(π_S ‖ π_T) at
t). Trained with the policy-gradient loss, it pushes the student toward what the teacher would have said at every
token of the student's own episodes (Agarwal et al. 2024, GKD; Thinking Machines' on-policy distillation; verl's
and prime-rl's `opd`). Optionally mixed with the env's outcome advantage (`reward_weight`)."""

from __future__ import annotations

import numpy as np


def reverse_kl_advantages(teacher_logprobs: np.ndarray, student_logprobs: np.ndarray, mask: np.ndarray,
                          outcome: float = 0.0, outcome_weight: float = 0.0, clamp: float | None = 20.0) -> np.ndarray:
    """Per response token: teacher − student (clamped to ±`clamp`) plus `outcome_weight * outcome`, 0 where `mask`
    is False (forced or prompt tokens carry no loss and no advantage)."""
    teacher = np.asarray(teacher_logprobs, np.float64)
    student = np.asarray(student_logprobs, np.float64)
    advantage = teacher - student
    if clamp is not None:
        advantage = np.clip(advantage, -clamp, clamp)
    advantage = advantage + outcome_weight * outcome
    return np.where(np.asarray(mask, bool), advantage, 0.0).astype(np.float32)
