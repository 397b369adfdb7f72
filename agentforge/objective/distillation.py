"""On-policy distillation's per-token advantage: the teacher's log-prob of the token the student sampled minus the
student's, A_t = log π_T(y_t | ·) − log π_S(y_t | ·) = −(the one-sample estimate of the reverse KL KL(π_S ‖ π_T) at
t). Trained with the policy-gradient loss, it pushes the student toward what the teacher would have said at every
token of the student's own episodes (Agarwal et al. 2024, GKD; Thinking Machines' on-policy distillation; verl's
and prime-rl's `opd`). Optionally mixed with the env's outcome advantage (`reward_weight`)."""

from __future__ import annotations

import math

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


TOPK_DIVERGENCES = ("forward", "reverse", "jsd")


def topk_divergence(student_logits, teacher_logits, k: int, divergence: str, beta: float = 0.5,
                    temperature: float = 1.0):
    """GKD's full-distribution losses on the teacher's top-k support (`learner.teacher.divergence`), per position.

    `student_logits` [N, V] (with gradient) and `teacher_logits` [N, V] (without) at the N loss positions; both
    distributions are taken at `temperature`, restricted to the teacher's k most likely tokens at that position and
    renormalised there (p: teacher, q: student), so each divergence is one between two distributions on k points:
    `forward` KL(p ‖ q) (the student covers what the teacher says: SFT-like), `reverse` KL(q ‖ p) (the student
    keeps to the teacher's modes: what the sampled-token estimate `reverse_kl_advantages` follows one token at a
    time), `jsd` the generalised Jensen-Shannon β·KL(p ‖ m) + (1 − β)·KL(q ‖ m), m = β·p + (1 − β)·q (GKD's JSD(β)).
    Returns the per-position loss [N] (float32) and the teacher's probability mass inside its top-k [N]: how much
    of the teacher the k tokens hold."""
    import torch

    if divergence not in TOPK_DIVERGENCES:
        raise ValueError(f"divergence {divergence!r} is not one of {TOPK_DIVERGENCES}")
    teacher = teacher_logits.detach().float() / temperature
    top_values, top_ids = teacher.topk(int(k), dim=-1)
    teacher_logp_full = top_values - torch.logsumexp(teacher, dim=-1, keepdim=True)
    mass = teacher_logp_full.exp().sum(-1)
    log_p = torch.log_softmax(top_values, dim=-1)  # the teacher on its top-k, renormalised
    log_q = torch.log_softmax(student_logits.float().gather(-1, top_ids) / temperature, dim=-1)
    p, q = log_p.exp(), log_q.exp()
    if divergence == "forward":
        loss = (p * (log_p - log_q)).sum(-1)
    elif divergence == "reverse":
        loss = (q * (log_q - log_p)).sum(-1)
    else:
        log_m = torch.logsumexp(torch.stack([log_p + math.log(beta), log_q + math.log1p(-beta)]), dim=0) \
            if 0.0 < beta < 1.0 else (log_p if beta >= 1.0 else log_q)
        loss = beta * (p * (log_p - log_m)).sum(-1) + (1.0 - beta) * (q * (log_q - log_m)).sum(-1)
    return loss, mass
