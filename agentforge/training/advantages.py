"""One iteration's advantages onto its training samples: per-turn ones from the algorithm's estimator over the groups,
or per-token ones (`needs_values`, `needs_teacher`) from what the learner scores on the sampled tokens: a critic's
values, a teacher's log-probs, or (self-distillation) the policy's own log-probs behind a privileged context."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentforge.errors import AgentforgeError
from agentforge.learner.batch import assign_advantages


@dataclass
class IterationAdvantages:
    per_turn: np.ndarray  # flat, in `iter_turns` order (trajectory records)
    spans: Any  # trained spans' advantages (gateway workflows), or None
    metrics: dict[str, float]


def compute_advantages(algorithm: Any, learner: Any, samples: list, owners: list, groups: list, name: str,
                       privileged_context: Any = None, tokenizer: Any = None) -> IterationAdvantages:
    """Set every sample's advantage (or token advantages and critic targets); `name` labels the samples' groups."""
    if not (algorithm.needs_values or algorithm.needs_teacher):
        per_turn = algorithm.advantages(groups)
        spans = algorithm.span_advantages(groups)
        assign_advantages(samples, owners, groups, per_turn, spans, name)
        return IterationAdvantages(per_turn, spans, {})
    started = time.perf_counter()
    scores, metrics = token_scores(algorithm, learner, samples, owners, groups, privileged_context, tokenizer)
    metrics["time/teacher" if algorithm.needs_teacher else "time/critic_values"] = time.perf_counter() - started
    return IterationAdvantages(algorithm.token_advantages(samples, owners, groups, scores), None, metrics)


def token_scores(algorithm: Any, learner: Any, samples: list, owners: list, groups: list, privileged_context: Any,
                 tokenizer: Any) -> tuple[list, dict[str, float]]:
    """What a per-token algorithm reads: the critic's values, the teacher's log-probs, or (self-distillation) the
    policy's own log-probs behind the privileged context."""
    if not samples:
        return [], {}
    if algorithm.needs_values:
        return learner.compute_values(samples), {}
    if algorithm.teacher_is_self:
        from agentforge.training.privileged import privileged_samples

        if privileged_context is None:
            raise AgentforgeError("self-distillation needs the env expert's privileged context; build the trainer "
                                  "with build_trainer (it adds it for algorithm=opd teacher=self)")
        shown, share = privileged_samples(samples, owners, groups, privileged_context, tokenizer)
        return learner.compute_logprobs(shown), {"train/privileged_fraction": share}
    return learner.compute_teacher_logprobs(samples), {}
