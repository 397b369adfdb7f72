"""Micro-batches of turn samples whose shared tokens are computed once, and the flat per-token view the loss works on.

Why: the G rollouts of a task see the very same first-turn prompt, every Sokoban turn repeats the same system prompt
and rules, a conversation repeats its earlier turns, and a single-turn task's G completions share their whole prompt.
Training each (prompt + response) apart recomputes those tokens each time, forward and backward, although they are
most of a turn's tokens. Three sharing modes (`learner.sharing`):

- `prefix` (default): a packed row is a *prefix tree* (trie) of its samples' token sequences, found token by token.
  Samples are sorted lexicographically, so each one shares with its predecessor the longest prefix it shares with any
  earlier sample of the row; only its remaining tokens are new nodes. A node attends to its ancestors and itself
  (a tree attention mask, SDPA with a boolean 4-D mask) and its position id is its depth, so every token sees exactly
  what it saw alone: the same logits up to float rounding, and so the same loss and gradients. Rows are forests:
  small tries fill the width a micro-batch pads to anyway.
- `prompt`: samples with identical prompt ids share one row (the prompt once, then each response): the tree of depth 1.
- `none`: one sample per row.

Every logical sample keeps its own advantage, loss mask and old log-probs: the loss tokens are a flat list where, for
token j of a sample's response, `row` and `source` name the node whose logits predict it (the sample's previous token,
wherever the tree put it), `target` its id. The vocabulary projection runs only at the positions that predict a
response token (`keep`, passed as a tensor `logits_to_keep`), not at shared prompt positions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from agentforge.learner.batch import TurnSample

SHARING_MODES = ("prefix", "prompt", "none")


def sharing_mode(sharing: str | bool) -> str:
    """The sharing mode; a bool is the old `share_prompts` (True: prompt, False: none)."""
    if isinstance(sharing, bool):
        return "prompt" if sharing else "none"
    if sharing not in SHARING_MODES:
        raise ValueError(f"unknown sharing mode {sharing!r}; use one of {', '.join(SHARING_MODES)}")
    return sharing


def _sort_key(sample: TurnSample) -> bytes:
    """Big-endian bytes of the token ids: byte order is token-lexicographic order (ids are non-negative)."""
    return sample.input_ids.astype(">i8").tobytes()


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def merged_tokens(prev: TurnSample | None, cur: TurnSample, sharing: str) -> int:
    """How many leading tokens of `cur` reuse the nodes of `prev` (its predecessor in a row)."""
    if prev is None or sharing == "none":
        return 0
    if sharing == "prompt":
        p = cur.prompt_len
        same = prev.prompt_len == p and np.array_equal(prev.input_ids[:p], cur.input_ids[:p])
        return p if same else 0
    return common_prefix(prev.input_ids, cur.input_ids)


def row_order(samples: Sequence[TurnSample], row: Sequence[int], sharing: str | bool = "prompt") -> list[int]:
    """The order a row's samples are laid out in: lexicographic for prefix trees, as given otherwise."""
    if sharing_mode(sharing) == "prefix":
        return sorted(row, key=lambda i: _sort_key(samples[i]))
    return list(row)


def row_length(samples: Sequence[TurnSample], row: Sequence[int], sharing: str | bool = "prompt") -> int:
    """Tokens of a packed row: every sample's tokens not shared with its predecessor (prompt sharing: the shared
    prompt once plus every response)."""
    mode = sharing_mode(sharing)
    total, prev = 0, None
    for i in row_order(samples, row, mode):
        total += samples[i].length - merged_tokens(prev, samples[i], mode)
        prev = samples[i]
    return total


def prompt_groups(samples: Sequence[TurnSample], share: bool = True) -> list[list[int]]:
    """Indices of samples with identical prompt ids, in order of first appearance (one group each without
    `share`)."""
    if not share:
        return [[i] for i in range(len(samples))]
    groups: dict[bytes, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s.input_ids[: s.prompt_len].tobytes(), []).append(i)
    return list(groups.values())


def _prefix_tries(samples: Sequence[TurnSample], budget: int) -> list[tuple[list[int], int]]:
    """Tries of lexicographically consecutive samples, each within `budget` tokens (a sample longer than that is a
    trie of its own), with their sizes."""
    order = sorted(range(len(samples)), key=lambda i: _sort_key(samples[i]))
    tries: list[tuple[list[int], int]] = []
    current: list[int] = []
    size = 0
    for i in order:
        add = samples[i].length - (merged_tokens(samples[current[-1]], samples[i], "prefix") if current else 0)
        if current and size + add > budget:
            tries.append((current, size))
            current, size, add = [], 0, samples[i].length
        current.append(i)
        size += add
    if current:
        tries.append((current, size))
    return tries


def _forest_rows(tries: list[tuple[list[int], int]]) -> list[list[int]]:
    """Tries packed first-fit-decreasing into rows no wider than the widest trie: the padding a micro-batch would
    carry anyway holds other tries instead, and no row is wider (attention costs row width per token)."""
    tries = sorted(tries, key=lambda t: t[1], reverse=True)
    if not tries:
        return []
    capacity = tries[0][1]
    rows: list[list[int]] = []
    loads: list[int] = []
    for members, size in tries:
        for k, load in enumerate(loads):
            if load + size <= capacity:
                rows[k].extend(members)
                loads[k] += size
                break
        else:
            rows.append(list(members))
            loads.append(size)
    return rows


def pack_rows(samples: Sequence[TurnSample], micro_batch_tokens: int,
              sharing: str | bool = True) -> list[list[int]]:
    """Rows within `micro_batch_tokens` (a single sample longer than that is a row of its own): prefix forests,
    samples sharing a prompt, or single samples (see the module docstring)."""
    mode = sharing_mode(sharing)
    if mode == "prefix":
        return _forest_rows(_prefix_tries(samples, micro_batch_tokens))
    rows: list[list[int]] = []
    for group in prompt_groups(samples, mode == "prompt"):
        current: list[int] = []
        for i in group:
            if current and row_length(samples, [*current, i], mode) > micro_batch_tokens:
                rows.append(current)
                current = []
            current.append(i)
        rows.append(current)
    return rows


def pack_micro_batches(samples: Sequence[TurnSample], micro_batch_tokens: int,
                       sharing: str | bool = True) -> list[list[list[int]]]:
    """Micro-batches of rows whose padded size (rows x longest row) stays within `micro_batch_tokens`. Rows are
    sorted by length (longest first) so rows of similar length share a micro-batch and padding stays small.
    `sharing`: prefix | prompt | none (a bool: True is prompt, False none)."""
    mode = sharing_mode(sharing)
    rows = pack_rows(samples, micro_batch_tokens, mode)
    lengths = {id(row): row_length(samples, row, mode) for row in rows}
    rows.sort(key=lambda row: lengths[id(row)], reverse=True)
    batches: list[list[list[int]]] = []
    current: list[list[int]] = []
    current_max = 0
    for row in rows:
        length = lengths[id(row)]
        new_max = max(current_max, length)
        if current and (len(current) + 1) * new_max > micro_batch_tokens:
            batches.append(current)
            current, new_max = [], length
        current.append(row)
        current_max = new_max
    if current:
        batches.append(current)
    return batches


def padding_stats(samples: Sequence[TurnSample], batches: Sequence[Sequence[Sequence[int]]],
                  sharing: str | bool = True) -> dict[str, float]:
    """What a packing costs: tokens the samples hold, tokens the rows compute (shared ones once), padded tokens
    (rows x width per micro-batch) and the vocabulary positions kept (one per predicted response token's source)."""
    mode = sharing_mode(sharing)
    row_tokens = sum(row_length(samples, row, mode) for batch in batches for row in batch)
    padded = sum(len(batch) * max(row_length(samples, row, mode) for row in batch) for batch in batches)
    sample_tokens = sum(s.length for s in samples)
    return {"sample_tokens": float(sample_tokens), "row_tokens": float(row_tokens), "padded_tokens": float(padded),
            "shared_fraction": 1.0 - row_tokens / max(sample_tokens, 1),
            "padding_fraction": 1.0 - row_tokens / max(padded, 1), "micro_batches": float(len(batches))}


def _contiguous_shards(samples: Sequence[TurnSample], order: list[int], num_shards: int) -> list[list[int]]:
    """`order` cut into `num_shards` consecutive pieces of about equal new-token load (prefix sharing: each shard
    keeps neighbours in lexicographic order, which share the longest prefixes)."""
    loads = [samples[i].length - (merged_tokens(samples[order[k - 1]], samples[i], "prefix") if k else 0)
             for k, i in enumerate(order)]
    total = float(sum(loads))
    shards: list[list[int]] = [[] for _ in range(num_shards)]
    done = 0.0
    for i, load in zip(order, loads, strict=True):
        k = min(num_shards - 1, int(num_shards * (done + load / 2) / max(total, 1.0)))
        shards[k].append(i)
        done += load
    return shards


def shard_indices_by_tokens(samples: Sequence[TurnSample], num_shards: int, sharing: str | bool = True
                            ) -> list[list[int]]:
    """Indices of `samples` split across ranks so each gets about the same number of tokens. Prompt sharing keeps
    samples that share a prompt on one rank (longest first, each to the lightest shard); prefix sharing cuts the
    lexicographic order into consecutive pieces. Every sample lands in exactly one shard; a shard may be empty
    when samples are few."""
    mode = sharing_mode(sharing)
    if mode == "prefix" and num_shards > 1:
        return _contiguous_shards(samples, sorted(range(len(samples)), key=lambda i: _sort_key(samples[i])),
                                  num_shards)
    units = sorted(prompt_groups(samples, mode == "prompt"), key=lambda u: row_length(samples, u, mode),
                   reverse=True)
    shards: list[list[int]] = [[] for _ in range(num_shards)]
    loads = [0] * num_shards
    for unit in units:
        k = loads.index(min(loads))
        shards[k].extend(unit)
        loads[k] += row_length(samples, unit, mode)
    return shards


def shard_by_tokens(samples: Sequence[TurnSample], num_shards: int, sharing: str | bool = True
                    ) -> list[list[TurnSample]]:
    """The samples themselves, sharded as `shard_indices_by_tokens` does."""
    return [[samples[i] for i in shard] for shard in shard_indices_by_tokens(samples, num_shards, sharing)]


@dataclass
class PackedBatch:
    """One micro-batch as model inputs plus its flat loss tokens.

    Model inputs: `input_ids`, `position_ids` [rows, width] and a boolean `attention_mask` [rows, 1, width, width]
    (True: may attend), and `keep`, the sorted positions whose logits are computed (in every row). Per token
    (length N, every response token of every sample): `row`, `source` (index into `keep` of the position whose
    logits predict it), `target`, `loss_mask` (sampled, not forced), `old_logprobs`, `advantages`, `sequence` (the
    sample as a tensor: sequence-level objectives group by it), optional `ref_logprobs`/`is_weights` (when every
    sample has them), `stratum` (when any sample has one; -1 for the others), `returns`/`old_values` (the critic's
    targets and values, when every sample has them), and `sample`/`index` (which sample,
    which response token) to map results back.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor
    keep: torch.Tensor
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
    returns: torch.Tensor | None = None
    old_values: torch.Tensor | None = None

    @property
    def offset(self) -> int:
        """The first position whose logits are computed."""
        return int(self.keep[0]) if self.keep.numel() else 0

    @property
    def logits_to_keep(self) -> torch.Tensor:
        """The positions the model projects onto the vocabulary (a 1-D index tensor, as HF models accept)."""
        return self.keep

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum())


def collate_packed(samples: Sequence[TurnSample], rows: Sequence[Sequence[int]],
                   device: torch.device | str = "cpu", sharing: str | bool = "prompt") -> PackedBatch:
    """Model inputs and flat loss tokens for the rows of one micro-batch (right padding; a padding position attends
    to itself only, so no attention row is empty). Each row is laid out as the tree `sharing` builds (see the
    module docstring; `prompt`, the default, expects rows of samples with one prompt, as `pack_rows` makes them)."""
    mode = sharing_mode(sharing)
    width = max(row_length(samples, row, mode) for row in rows)
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
    with_values = all(s.returns is not None and s.old_values is not None for s in members)
    tok_returns: list[np.ndarray] = []
    tok_values: list[np.ndarray] = []
    tok_stratum: list[np.ndarray] = []
    tok_ref: list[np.ndarray] = []
    tok_weight: list[np.ndarray] = []
    tril_cache: dict[int, np.ndarray] = {}
    for r, row in enumerate(rows):
        start = 0
        prev: TurnSample | None = None
        prev_path = np.zeros(0, np.int64)
        for i in row_order(samples, row, mode):
            s = samples[i]
            length, p = s.length, s.prompt_len
            m = merged_tokens(prev, s, mode)
            path = np.empty(length, np.int64)  # the row position of each of the sample's tokens
            path[:m] = prev_path[:m]
            new = np.arange(start, start + length - m)
            path[m:] = new
            input_ids[r, new] = s.input_ids[m:]
            positions[r, new] = np.arange(m, length)
            if length not in tril_cache:
                tril_cache[length] = np.tril(np.ones((length, length), bool))
            mask[r, 0][np.ix_(new, path)] = tril_cache[length][m:]
            n = length - p
            tok_row.append(np.full(n, r))
            tok_source.append(path[p - 1:length - 1])
            tok_target.append(s.input_ids[p:])
            tok_loss.append(s.loss_mask[p:])
            tok_old.append(s.old_logprobs[p:])
            tok_adv.append(s.response_advantages())
            if with_values:
                tok_returns.append(s.returns[p:])
                tok_values.append(s.old_values[p:])
            tok_sample.append(np.full(n, i))
            tok_index.append(np.arange(n))
            if with_ref:
                tok_ref.append(s.ref_logprobs[p:])
            if with_weights:
                tok_weight.append(s.is_weights[p:])
            if with_strata:
                tok_stratum.append(np.full(n, -1 if s.stratum is None else int(s.stratum), np.int64))
            start += length - m
            prev, prev_path = s, path
    as_tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    cat = np.concatenate
    source_pos = cat(tok_source).astype(np.int64)
    keep = np.unique(source_pos)
    return PackedBatch(
        input_ids=as_tensor(input_ids), position_ids=as_tensor(positions), attention_mask=as_tensor(mask),
        keep=as_tensor(keep), row=as_tensor(cat(tok_row).astype(np.int64)),
        source=as_tensor(np.searchsorted(keep, source_pos).astype(np.int64)),
        target=as_tensor(cat(tok_target).astype(np.int64)), loss_mask=as_tensor(cat(tok_loss).astype(bool)),
        old_logprobs=as_tensor(cat(tok_old).astype(np.float32)), advantages=as_tensor(cat(tok_adv)),
        sample=cat(tok_sample), index=cat(tok_index), sequence=as_tensor(cat(tok_sample).astype(np.int64)),
        ref_logprobs=as_tensor(cat(tok_ref).astype(np.float32)) if with_ref else None,
        is_weights=as_tensor(cat(tok_weight).astype(np.float32)) if with_weights else None,
        stratum=as_tensor(cat(tok_stratum)) if with_strata else None,
        returns=as_tensor(cat(tok_returns).astype(np.float32)) if with_values else None,
        old_values=as_tensor(cat(tok_values).astype(np.float32)) if with_values else None,
    )


def packed_logits(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """The logits that predict each flat token, [N, vocab]: one forward pass over the packed rows, the vocabulary
    projection only at the `keep` positions."""
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                use_cache=False, logits_to_keep=batch.logits_to_keep)
    return out.logits[batch.row, batch.source]


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


def per_token_results(samples: Sequence[TurnSample], batches: Sequence[Sequence[Sequence[int]]], num_batches: int,
                      device: torch.device | str, sharing: str | bool,
                      compute: Callable[[PackedBatch], torch.Tensor]) -> list[np.ndarray]:
    """`compute(batch)` (one value per packed token: a log-prob, a value) over this rank's micro-batches, scattered
    back to each sample's response tokens (float32, aligned with `response_ids`). A rank with fewer micro-batches
    than `num_batches` (the ranks' maximum) runs padding ones, so collective calls inside `compute` line up. The
    caller chooses the module's mode and the autograd context."""
    out = [np.zeros(s.length - s.prompt_len, np.float32) for s in samples]
    for k in range(num_batches):
        batch = collate_packed(samples, batches[k], device, sharing) if k < len(batches) else padding_batch(device)
        values = compute(batch).detach().float().cpu().numpy()
        if k < len(batches):
            for i, j, value in zip(batch.sample, batch.index, values, strict=True):
                out[i][j] = value
    return out

