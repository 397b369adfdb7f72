"""Micro-batches of turn samples with shared prompts computed once, and the flat per-token view the loss works on.

Why: the G rollouts of a task see the very same first-turn prompt (and often the same later states), and a
single-turn task's G completions share their whole prompt. Training each (prompt + response) separately recomputes
that prompt G times, forward and backward, although prompts are most of a turn's tokens. Here samples whose prompt
ids are identical become one *row*: the prompt once, then each response in turn; every response attends to the
prompt and to its own earlier tokens only, and its position ids continue the prompt's, so each response sees
exactly what it saw alone (the same logits, up to float rounding, and so the same loss and gradients).

The loss tokens are then a flat list: for token j of response i, the row, the position whose logits predict it
(the prompt's last position for j = 0, else the previous response position), its target id, its old log-prob and
its advantage. Logits are computed only from the first position that predicts a response token (`offset`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from agentforge.learner.batch import TurnSample


def prompt_groups(samples: Sequence[TurnSample], share: bool = True) -> list[list[int]]:
    """Indices of samples with identical prompt ids, in order of first appearance (one group each without
    `share`)."""
    if not share:
        return [[i] for i in range(len(samples))]
    groups: dict[bytes, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s.input_ids[: s.prompt_len].tobytes(), []).append(i)
    return list(groups.values())


def row_length(samples: Sequence[TurnSample], row: Sequence[int]) -> int:
    """Tokens of a packed row: the shared prompt once plus every response."""
    first = samples[row[0]]
    return first.prompt_len + sum(samples[i].length - samples[i].prompt_len for i in row)


def pack_rows(samples: Sequence[TurnSample], micro_batch_tokens: int, share_prompts: bool = True) -> list[list[int]]:
    """Rows: samples sharing a prompt, split so that a row stays within `micro_batch_tokens` (a single sample longer
    than that is a row of its own)."""
    rows: list[list[int]] = []
    for group in prompt_groups(samples, share_prompts):
        current: list[int] = []
        for i in group:
            if current and row_length(samples, [*current, i]) > micro_batch_tokens:
                rows.append(current)
                current = []
            current.append(i)
        rows.append(current)
    return rows


def pack_micro_batches(samples: Sequence[TurnSample], micro_batch_tokens: int,
                       share_prompts: bool = True) -> list[list[list[int]]]:
    """Micro-batches of rows whose padded size (rows x longest row) stays within `micro_batch_tokens`. Rows are
    sorted by length (longest first) so rows of similar length share a micro-batch and padding stays small."""
    rows = pack_rows(samples, micro_batch_tokens, share_prompts)
    rows.sort(key=lambda row: row_length(samples, row), reverse=True)
    batches: list[list[list[int]]] = []
    current: list[list[int]] = []
    current_max = 0
    for row in rows:
        length = row_length(samples, row)
        new_max = max(current_max, length)
        if current and (len(current) + 1) * new_max > micro_batch_tokens:
            batches.append(current)
            current, new_max = [], length
        current.append(row)
        current_max = new_max
    if current:
        batches.append(current)
    return batches


def shard_indices_by_tokens(samples: Sequence[TurnSample], num_shards: int, share_prompts: bool = True
                            ) -> list[list[int]]:
    """Indices of `samples` split across ranks so each gets about the same number of tokens (longest first, each to
    the lightest shard), keeping samples that share a prompt on one rank (so it is computed once). Every sample
    lands in exactly one shard; a shard may be empty when samples are few."""
    units = sorted(prompt_groups(samples, share_prompts), key=lambda u: row_length(samples, u), reverse=True)
    shards: list[list[int]] = [[] for _ in range(num_shards)]
    loads = [0] * num_shards
    for unit in units:
        k = loads.index(min(loads))
        shards[k].extend(unit)
        loads[k] += row_length(samples, unit)
    return shards


def shard_by_tokens(samples: Sequence[TurnSample], num_shards: int, share_prompts: bool = True
                    ) -> list[list[TurnSample]]:
    """The samples themselves, sharded as `shard_indices_by_tokens` does."""
    return [[samples[i] for i in shard] for shard in shard_indices_by_tokens(samples, num_shards, share_prompts)]


@dataclass
class PackedBatch:
    """One micro-batch as model inputs plus its flat loss tokens.

    Model inputs: `input_ids`, `position_ids` [rows, width] and a boolean `attention_mask` [rows, 1, width, width]
    (True: may attend). Per token (length N, every response token of every sample): `row`, `source` (the
    position whose logits predict it, minus `offset`), `target`, `loss_mask` (sampled, not forced), `old_logprobs`,
    `advantages`, `sequence` (the sample as a tensor: sequence-level objectives group by it), optional
    `ref_logprobs`/`is_weights` (when every sample has them), `stratum` (when any sample has one; -1 for the
    others), and `sample`/`index` (which sample, which response token) to map results back.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor
    offset: int
    row: torch.Tensor
    source: torch.Tensor
    target: torch.Tensor
    loss_mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    sample: np.ndarray
    index: np.ndarray
    sequence: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    is_weights: torch.Tensor | None = None
    stratum: torch.Tensor | None = None

    @property
    def logits_to_keep(self) -> int:
        """How many final positions' logits the model must return (from `offset` to the end)."""
        return int(self.input_ids.shape[1]) - self.offset

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum())


def collate_packed(samples: Sequence[TurnSample], rows: Sequence[Sequence[int]],
                   device: torch.device | str = "cpu") -> PackedBatch:
    """Model inputs and flat loss tokens for the rows of one micro-batch (right padding; a padding position attends
    to itself only, so no attention row is empty)."""
    width = max(row_length(samples, row) for row in rows)
    n_rows = len(rows)
    input_ids = np.zeros((n_rows, width), np.int64)
    positions = np.zeros((n_rows, width), np.int64)
    mask = np.zeros((n_rows, 1, width, width), bool)
    idx = np.arange(width)
    mask[:, 0, idx, idx] = True
    tok_row, tok_source, tok_target, tok_loss, tok_old, tok_adv, tok_sample, tok_index = ([] for _ in range(8))
    members = [samples[i] for row in rows for i in row]
    with_ref = all(s.ref_logprobs is not None for s in members)
    with_weights = all(s.is_weights is not None for s in members)
    with_strata = any(s.stratum is not None for s in members)
    tok_stratum: list[np.ndarray] = []
    tok_ref: list[np.ndarray] = []
    tok_weight: list[np.ndarray] = []
    offset = min(samples[row[0]].prompt_len for row in rows) - 1
    for r, row in enumerate(rows):
        first = samples[row[0]]
        p = first.prompt_len
        input_ids[r, :p] = first.input_ids[:p]
        positions[r, :p] = np.arange(p)
        mask[r, 0, :p, :p] = np.tril(np.ones((p, p), bool))
        start = p
        for i in row:
            s = samples[i]
            n = s.length - s.prompt_len
            span = slice(start, start + n)
            input_ids[r, span] = s.input_ids[s.prompt_len:]
            positions[r, span] = np.arange(p, p + n)
            mask[r, 0, span, :p] = True
            mask[r, 0, span, span] = np.tril(np.ones((n, n), bool))
            sources = np.r_[p - 1, np.arange(start, start + n - 1)] if n else np.zeros(0, np.int64)
            tok_row.append(np.full(n, r))
            tok_source.append(sources - offset)
            tok_target.append(s.input_ids[s.prompt_len:])
            tok_loss.append(s.loss_mask[s.prompt_len:])
            tok_old.append(s.old_logprobs[s.prompt_len:])
            tok_adv.append(np.full(n, s.advantage, np.float32))
            tok_sample.append(np.full(n, i))
            tok_index.append(np.arange(n))
            if with_ref:
                tok_ref.append(s.ref_logprobs[s.prompt_len:])
            if with_weights:
                tok_weight.append(s.is_weights[s.prompt_len:])
            if with_strata:
                tok_stratum.append(np.full(n, -1 if s.stratum is None else int(s.stratum), np.int64))
            start += n
    as_tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    cat = np.concatenate
    return PackedBatch(
        input_ids=as_tensor(input_ids), position_ids=as_tensor(positions), attention_mask=as_tensor(mask),
        offset=offset, row=as_tensor(cat(tok_row).astype(np.int64)), source=as_tensor(cat(tok_source).astype(np.int64)),
        target=as_tensor(cat(tok_target).astype(np.int64)), loss_mask=as_tensor(cat(tok_loss).astype(bool)),
        old_logprobs=as_tensor(cat(tok_old).astype(np.float32)), advantages=as_tensor(cat(tok_adv)),
        sample=cat(tok_sample), index=cat(tok_index), sequence=as_tensor(cat(tok_sample).astype(np.int64)),
        ref_logprobs=as_tensor(cat(tok_ref).astype(np.float32)) if with_ref else None,
        is_weights=as_tensor(cat(tok_weight).astype(np.float32)) if with_weights else None,
        stratum=as_tensor(cat(tok_stratum)) if with_strata else None,
    )


def packed_logits(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """The logits that predict each flat token, [N, vocab]: one forward pass over the packed rows, the vocabulary
    projection only from `offset` on."""
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                use_cache=False, logits_to_keep=batch.logits_to_keep)
    logits = out.logits[:, -batch.logits_to_keep:]
    return logits[batch.row, batch.source]


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, with_entropy: bool = False,
                   entropy_grad: bool = False, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target) per flat token in fp32 and, if asked, the next-token entropy (no gradient unless
    `entropy_grad`), both of the distribution softmax(logits / temperature): the policy the engine sampled from."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    log_z = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z
    if not with_entropy:
        return logp, None
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy = log_z - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logp, entropy


def padding_batch(device: torch.device | str = "cpu") -> PackedBatch:
    """A two-token row without loss tokens: a rank with fewer micro-batches than the others runs these, so every
    rank makes the same forward/backward calls (their gradients are zero)."""
    sample = TurnSample(input_ids=np.zeros(2, np.int64), loss_mask=np.zeros(2, bool),
                        old_logprobs=np.zeros(2, np.float32), advantage=0.0, prompt_len=1)
    return collate_packed([sample], [[0]], device)
