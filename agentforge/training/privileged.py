"""Self-distillation's teacher input (`algorithm=opd algorithm.teacher=self`): each trained turn as the student
played it, with a privileged context (the env expert's solution of the task) put into its prompt. The policy's own
weights score the student's sampled tokens behind that prompt; the student trains on its own turn without it.

Token-exact: the hint is new text, tokenized once per task and inserted as token ids right after the chat
template's opening of the first user message (ChatML's `<|im_start|>user\\n`; at the very start for a template
without that marker); the turn's prompt and response ids are never decoded and re-tokenized."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agentforge.learner.batch import TurnSample
from agentforge.types import Group, Span, Task, Turn

HINT = "(Known only to you: {solution}.)\n"
CHATML_USER = "<|im_start|>user\n"

PrivilegedContext = Callable[[Task], "str | None"]


def user_turn_marker(tokenizer: Any) -> list[int]:
    """The ids that open a user message in the chat template, or [] when the template is not ChatML."""
    if "<|im_start|>" not in tokenizer.get_vocab():
        return []
    return list(tokenizer.encode(CHATML_USER, add_special_tokens=False))


def insertion_point(prompt: Sequence[int], marker: Sequence[int]) -> int:
    """Just after the first occurrence of `marker` in `prompt` (0 when absent or empty)."""
    n = len(marker)
    if n:
        for i in range(len(prompt) - n + 1):
            if list(prompt[i:i + n]) == list(marker):
                return i + n
    return 0


def privileged_samples(samples: Sequence[TurnSample], owners: Sequence[Turn | Span], groups: Sequence[Group],
                       context: PrivilegedContext, tokenizer: Any) -> tuple[list[TurnSample], float]:
    """The teacher's view of each sample (same response ids and loss mask, the hint in the prompt), and the share
    of samples that had a hint (a task the expert cannot solve keeps its plain prompt)."""
    task_of = {id(turn): trajectory.task for group in groups for trajectory in group.trajectories
               for turn in trajectory.turns}
    marker = user_turn_marker(tokenizer)
    hints: dict[str, list[int]] = {}
    out: list[TurnSample] = []
    hinted = 0
    for sample, owner in zip(samples, owners, strict=True):
        task = task_of.get(id(owner))
        if task is not None and task.key not in hints:
            solution = context(task)
            hints[task.key] = list(tokenizer.encode(HINT.format(solution=solution), add_special_tokens=False)) \
                if solution else []
        hint = hints.get(task.key, []) if task is not None else []
        p = sample.prompt_len
        prompt, response = sample.input_ids[:p], sample.input_ids[p:]
        at = insertion_point(prompt, marker)
        ids = np.concatenate([prompt[:at], np.asarray(hint, np.int64), prompt[at:], response])
        mask = np.concatenate([np.zeros(p + len(hint), bool), sample.loss_mask[p:]])
        out.append(TurnSample(input_ids=ids, loss_mask=mask, old_logprobs=np.zeros(len(ids), np.float32),
                              advantage=0.0, prompt_len=p + len(hint)))
        hinted += bool(hint)
    return out, hinted / len(samples) if samples else 0.0
