"""The teacher of on-policy distillation on a learner rank: a frozen causal LM that scores the tokens the student
sampled (`Algorithm.needs_teacher`, e.g. opd). Loaded once per rank from `learner.teacher.path`; its tokenizer must
be the student's, token for token, or its log-probs would score other tokens than the ones sampled."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentforge.errors import AgentforgeError, ConfigError
from agentforge.learner.batch import TurnSample
from agentforge.learner.packing import pack_micro_batches, packed_logits, per_token_results, token_logprobs

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def check_same_tokenizer(student: str | Path, teacher: str | Path) -> None:
    """Refuse a teacher whose vocabulary differs from the student's (cross-tokenizer distillation is not built)."""
    from transformers import AutoTokenizer

    a, b = AutoTokenizer.from_pretrained(str(student)), AutoTokenizer.from_pretrained(str(teacher))
    if a.get_vocab() != b.get_vocab():
        raise ConfigError(f"the teacher's tokenizer ({teacher}: {len(b)} tokens) is not the student's ({student}: "
                          f"{len(a)} tokens); distillation trains or scores one sequence of token ids for both, so "
                          "they must share one tokenizer: pick a teacher of the student's family")


class TeacherRole:
    """The frozen teacher; `logprobs(samples)` gives its log-prob of each sampled response token."""

    def __init__(self, student_path: str | Path, config: Any, device: torch.device | str,
                 all_reduce: Callable[[list[float], str], list[float]]) -> None:
        from transformers import AutoModelForCausalLM

        settings = config.teacher
        path = Path(str(settings.path)).expanduser()
        if not (path / "config.json").is_file():
            raise AgentforgeError(f"learner.teacher.path={settings.path!r} is not a model folder (no config.json); "
                                  "give an HF folder, or export a run first: agentforge export <run dir>")
        check_same_tokenizer(student_path, path)
        dtype = DTYPES[settings.dtype or config.dtype]
        self.model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(device).eval()
        self.model.requires_grad_(False)
        self.model.config.use_cache = False
        self.config, self.device, self.all_reduce, self.path = config, device, all_reduce, path

    def logprobs(self, samples: Sequence[TurnSample]) -> list[np.ndarray]:
        """At the learner's sampling temperature, as the student's old log-probs are."""
        samples = list(samples)
        batches = pack_micro_batches(samples, self.config.micro_batch_tokens, self.config.sharing)
        num_batches = int(self.all_reduce([float(len(batches))], "max")[0])
        temperature = self.config.sampling_temperature

        def score(batch: Any) -> torch.Tensor:
            return token_logprobs(packed_logits(self.model, batch), batch.target, temperature=temperature)[0]

        with torch.no_grad():
            return per_token_results(samples, batches, num_batches, self.device, self.config.sharing, score)
