"""On-policy distillation (`algorithm=opd`): the student plays its own multi-turn episodes, a frozen teacher
(`learner.teacher.path`) scores every token the student sampled, and the per-token advantage is the teacher's minus
the student's log-prob (`objective.distillation`): a dense signal that needs no critic and no success. With
`reward_weight > 0` the env's group-relative outcome advantage (GRPO's) is added to every token of an episode.

`teacher: self` is self-distillation from privileged context (SDPO, OPSD): no second model; the policy's own
weights, shown the env expert's solution of the task in the prompt (`training/privileged.py`), score the tokens the
student sampled without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agentforge.algorithms.base import ALGORITHMS, Algorithm, check_bool, check_choice, check_number
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.objective.distillation import reverse_kl_advantages
from agentforge.objective.estimators import outcome_group_relative
from agentforge.objective.turns import TurnBatch, iter_turns
from agentforge.types import Group, Span, Turn


@dataclass
class OPDConfig:
    option_help: ClassVar[dict[str, str]] = {
        "reward_weight": "weight of the env's group-relative outcome advantage added per token (0: pure distillation)",
        "norm_by_std": "the outcome part: divide by the group's std (GRPO)",
        "epsilon": "the outcome part's std floor",
        "clamp": "|teacher - student| per token clamped to this",
        "teacher": "model (learner.teacher.path) | self (the policy itself, shown the env expert's solution: "
                   "self-distillation)",
    }

    reward_weight: float = 0.0
    norm_by_std: bool = True
    epsilon: float = 1e-6
    clamp: float = 20.0
    teacher: str = "model"


@ALGORITHMS.register("opd")
class OPD(Algorithm):
    """A_t = log π_teacher(y_t) − log π_student(y_t) (+ reward_weight · A_outcome of the episode)."""

    name = "opd"
    config_class = OPDConfig
    config: OPDConfig
    needs_teacher = True
    not_asynchronous = ("its advantages read the teacher at update time; asynchronous distillation is not built yet "
                        "(use trainer.asynchronous.max_staleness=0)")
    not_gateway = "the gateway path is not built for distillation yet"

    def validate(self) -> None:
        check_number(self.name, "reward_weight", self.config.reward_weight, low=0.0)
        check_bool(self.name, "norm_by_std", self.config.norm_by_std)
        check_number(self.name, "epsilon", self.config.epsilon, low=0.0, low_open=True)
        check_number(self.name, "clamp", self.config.clamp, low=0.0, low_open=True)
        check_choice(self.name, "teacher", self.config.teacher, ("model", "self"))

    @property
    def teacher_is_self(self) -> bool:
        """Self-distillation: the policy's own weights under a privileged context are the teacher."""
        return self.config.teacher == "self"

    def check_run(self, run: Mapping[str, Any]) -> None:
        if self.config.reward_weight > 0 and int(run.get("trainer", {}).get("group_size", 2)) < 2:
            raise ConfigError("algorithm 'opd': reward_weight > 0 adds a group-relative outcome advantage, which needs "
                              "trainer.group_size >= 2 (or set algorithm.reward_weight=0)")
        divergence = str((run.get("learner", {}).get("teacher") or {}).get("divergence") or "sampled")
        if divergence != "sampled" and (self.teacher_is_self or self.config.reward_weight > 0):
            raise ConfigError(f"algorithm 'opd' with learner.teacher.divergence={divergence} trains the top-k "
                              "divergence to a loaded teacher alone: it is not built for teacher=self or "
                              "reward_weight > 0 (use divergence=sampled for those)")
        if self.teacher_is_self:
            env = str(run.get("env", {}).get("name", ""))
            if env in ("agent", "mix"):
                raise ConfigError(f"algorithm 'opd' with teacher=self shows the teacher the env expert's solution; "
                                  f"env={env} has no single expert: use teacher=model")
            from agentforge.envs.base import expert_for

            expert_for(env)  # the env has an expert to give the privileged context, or the error names those that do
            return
        teacher = run.get("learner", {}).get("teacher") or {}
        if not (teacher.get("path") or teacher.get("url")):
            raise ConfigError("algorithm 'opd' distils from a teacher: set learner.teacher.path=<model folder> (an HF "
                              "folder or `agentforge export` of a run, with the student's tokenizer), or "
                              "learner.teacher.url=<OpenAI-compatible base URL> of a served one")

    def token_advantages(self, samples: Sequence, owners: Sequence[Turn | Span], groups: Sequence[Group],
                         teacher_logprobs: Sequence[np.ndarray]) -> np.ndarray:
        """Set each sample's token advantages from the teacher's log-probs (per response token); the per-turn mean
        comes back flat in `iter_turns` order (for the trajectory records)."""
        if any(isinstance(o, Span) for o in owners):
            raise AgentforgeError("opd trains env turns only; a workflow that adds trained spans needs its own "
                                  "advantage for them")
        turns = list(iter_turns(groups))
        outcome = np.zeros(len(turns))
        if self.config.reward_weight > 0:
            outcome = outcome_group_relative(TurnBatch.from_groups(groups), self.config).per_turn
        turn_index = {id(t): k for k, t in enumerate(turns)}
        per_turn = np.zeros(len(turns))
        gaps: list[np.ndarray] = []
        for s, owner, teacher in zip(samples, owners, teacher_logprobs, strict=True):
            p, mask = s.prompt_len, s.loss_mask[s.prompt_len:]
            k = turn_index[id(owner)]
            response = reverse_kl_advantages(teacher, s.old_logprobs[p:], mask, float(outcome[k]),
                                             float(self.config.reward_weight), float(self.config.clamp))
            s.set_token_targets(response)
            per_turn[k] = s.advantage
            gaps.append((np.asarray(teacher, np.float64) - s.old_logprobs[p:])[mask])
        gap = np.concatenate(gaps) if gaps else np.zeros(0)
        self.last_metrics = {"reverse_kl": float(-gap.mean()) if gap.size else 0.0,
                             "teacher_minus_student_abs": float(np.abs(gap).mean()) if gap.size else 0.0,
                             "outcome_abs_mean": float(np.abs(outcome).mean()) if outcome.size else 0.0}
        return per_turn

    def compute(self, batch: object) -> np.ndarray:
        raise AgentforgeError("opd's advantages need the teacher's log-probs of the sampled tokens: the trainer calls "
                              "token_advantages(samples, owners, groups, teacher_logprobs), not advantages(groups)")
