"""The learner's input: one sample per agent turn, and packing those samples into token-bounded micro-batches.

A turn sample is `prompt_ids + response_ids` exactly as the engine saw and produced them (never re-tokenised).
Which spans become samples is decided by their loss role (`types.LossRole`), never by the algorithm's name.
Per-token arrays are aligned with `input_ids`: `loss_mask[i]` says whether token i carries loss (response tokens
that were sampled, not forced), `old_logprobs[i]` is the engine's log-prob of token i (0 on prompt tokens).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from agentforge.errors import AgentforgeError
from agentforge.types import Group, LossRole, Span, Trajectory, Turn

TOKEN_TARGETS = ("token_advantages", "returns", "old_values")  # a critic-based algorithm's per-token arrays


@dataclass
class TurnSample:
    """One turn as training data; `advantage` is broadcast to the turn's response tokens unless the algorithm gives
    `token_advantages` (one per token, aligned with `input_ids`, 0 on the prompt: GAE over a critic's values).

    A critic-based algorithm also sets `returns` (the value targets) and `old_values` (the critic's values the
    targets were computed from, for the clipped value loss), both aligned with `input_ids`.

    Filled in by the learner's `prepare` when the objective needs them (all aligned with `input_ids`, 0 on the
    prompt): `rollout_logprobs` (the engine's, kept when `old_logprobs` are the learner's recomputed ones),
    `ref_logprobs` (the reference policy's), `is_weights` (rollout-correction weights); rejection clears
    `loss_mask` where a token or sequence was dropped. `stratum` (optional, ≥ 0) names a subset whose clip counts
    the learner reports apart (`count/clipped_stratum_<s>`, `count/tokens_stratum_<s>`): asynchronous training sets
    it to the turn's version lag.
    """

    input_ids: np.ndarray  # int64 [L]
    loss_mask: np.ndarray  # bool [L]
    old_logprobs: np.ndarray  # float32 [L]
    advantage: float
    prompt_len: int
    rollout_logprobs: np.ndarray | None = None
    ref_logprobs: np.ndarray | None = None
    is_weights: np.ndarray | None = None
    stratum: int | None = None
    token_advantages: np.ndarray | None = None
    returns: np.ndarray | None = None
    old_values: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.input_ids = np.asarray(self.input_ids, dtype=np.int64)
        self.loss_mask = np.asarray(self.loss_mask, dtype=bool)
        self.old_logprobs = np.asarray(self.old_logprobs, dtype=np.float32)
        n = len(self.input_ids)
        if len(self.loss_mask) != n or len(self.old_logprobs) != n:
            raise ValueError(f"sample arrays disagree: {n} input ids, {len(self.loss_mask)} mask values, "
                             f"{len(self.old_logprobs)} log-probs; all must be aligned with input_ids")
        for name in ("rollout_logprobs", "ref_logprobs", "is_weights", *TOKEN_TARGETS):
            value = getattr(self, name)
            if value is not None:
                value = np.asarray(value, dtype=np.float32)
                if len(value) != n:
                    raise ValueError(f"sample {name} has {len(value)} values for {n} input ids; align it with "
                                     "input_ids")
                setattr(self, name, value)
        if self.prompt_len < 1:
            raise ValueError("a sample needs at least one prompt token: the first response token is predicted "
                             "from the logits at the position before it")
        if self.loss_mask[: self.prompt_len].any():
            raise ValueError("loss_mask marks prompt tokens; only response tokens may carry loss")

    @property
    def length(self) -> int:
        return len(self.input_ids)

    def response_advantages(self) -> np.ndarray:
        """The advantage of each response token (float32): the token-level ones, or the turn's broadcast."""
        if self.token_advantages is not None:
            return self.token_advantages[self.prompt_len:]
        return np.full(self.length - self.prompt_len, self.advantage, np.float32)

    def set_token_targets(self, advantages: np.ndarray, returns: np.ndarray | None = None,
                          old_values: np.ndarray | None = None) -> None:
        """Token-level advantages (a critic's returns and values beside, if any), each given per response token or
        per loss token (spread onto the response, 0 on forced tokens); the prompt gets 0, and `advantage` becomes
        the mean over the loss tokens (the turn's figure in trajectory records)."""
        self.token_advantages = self._aligned("token advantages", advantages)
        if returns is not None:
            self.returns = self._aligned("returns", returns)
        if old_values is not None:
            self.old_values = self._aligned("old values", old_values)
        on_loss = self.token_advantages[self.loss_mask]
        self.advantage = float(on_loss.mean()) if on_loss.size else 0.0

    def _aligned(self, name: str, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, np.float32)
        mask = self.loss_mask[self.prompt_len:]
        if len(values) == len(mask):
            response = values
        elif len(values) == int(mask.sum()):
            response = np.zeros(len(mask), np.float32)
            response[mask] = values
        else:
            raise ValueError(f"{len(values)} {name} for a turn of {len(mask)} response tokens ({int(mask.sum())} "
                             "with loss); give one per response token or one per loss token")
        return np.concatenate([np.zeros(self.prompt_len, np.float32), response])

    def has_signal(self) -> bool:
        """Whether any loss token has a non-zero advantage (a sample without adds exactly 0 to the policy loss)."""
        if self.token_advantages is None:
            return self.advantage != 0.0
        return bool(np.any(self.token_advantages[self.loss_mask] != 0.0))

    def advantages_finite(self) -> bool:
        if self.token_advantages is None:
            return math.isfinite(self.advantage)
        return bool(np.isfinite(self.token_advantages[self.loss_mask]).all())

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum())

    @property
    def response_ids(self) -> np.ndarray:
        return self.input_ids[self.prompt_len:]

    @classmethod
    def from_turn(cls, turn: Turn | Span, advantage: float, algorithm: str = "the algorithm") -> TurnSample:
        """A policy-gradient sample of a trained turn or span: forced tokens (decoding interventions) carry no loss.
        A trained span must keep the engine's token ids and one log-prob per token: else an error naming
        `algorithm` (whose workflow or hooks made it)."""
        role = LossRole(turn.role).value
        n = len(turn.response_ids)
        if not turn.prompt_ids or (n and not turn.logprobs):
            raise AgentforgeError(f"{algorithm} produced a trained {role} span without token ids or log-probs; "
                                  "record the engine's Completion (token_ids, logprobs) for every trained span, or "
                                  "give it role not_trained")
        if len(turn.logprobs) != n:
            raise ValueError(f"{role} span has {n} response tokens but {len(turn.logprobs)} log-probs; the engine "
                             "must return one log-prob per sampled token")
        forced = list(turn.forced_mask) if turn.forced_mask else [False] * n
        if len(forced) != n:
            raise ValueError(f"{role} span has {n} response tokens but a forced_mask of length {len(forced)}")
        return cls._build(turn.prompt_ids, turn.response_ids, ~np.asarray(forced, dtype=bool), turn.logprobs,
                          float(advantage))

    @classmethod
    def for_sft(cls, prompt_ids: Sequence[int], response_ids: Sequence[int],
                forced_mask: Sequence[bool] | None = None) -> TurnSample:
        """A supervised (warm-start) sample: advantage 1, old log-probs unused (zeros)."""
        keep = np.ones(len(response_ids), dtype=bool) if forced_mask is None else ~np.asarray(forced_mask, bool)
        return cls._build(prompt_ids, response_ids, keep, np.zeros(len(response_ids), np.float32), 1.0)

    @classmethod
    def _build(cls, prompt_ids: Sequence[int], response_ids: Sequence[int], response_mask: np.ndarray,
               response_logprobs: Sequence[float], advantage: float) -> TurnSample:
        p = len(prompt_ids)
        ids = np.concatenate([np.asarray(prompt_ids, np.int64), np.asarray(response_ids, np.int64)])
        mask = np.concatenate([np.zeros(p, bool), np.asarray(response_mask, bool)])
        logps = np.concatenate([np.zeros(p, np.float32), np.asarray(response_logprobs, np.float32)])
        return cls(input_ids=ids, loss_mask=mask, old_logprobs=logps, advantage=advantage, prompt_len=p)


def iter_trained_spans(groups: Sequence[Group]) -> Iterator[Span]:
    """Spans outside the env turns whose role is trained (a strategy ...), in flat group/trajectory/span order: the
    order of `Algorithm.span_advantages`."""
    for group in groups:
        for trajectory in group.trajectories:
            yield from (span for span in trajectory.spans
                        if LossRole(span.role).trained and not LossRole(span.role).takes_turn_advantage)


def iter_turn_spans(groups: Sequence[Group]) -> Iterator[tuple[Span, Turn]]:
    """Trained spans that take the advantage of an env turn (summaries: the turn that follows them), with that turn
    (the episode's last when it ended before the turn came)."""
    for group in groups:
        for trajectory in group.trajectories:
            for span in trajectory.spans:
                if LossRole(span.role).takes_turn_advantage and trajectory.turns:
                    index = min(int(span.turn_index or 0), len(trajectory.turns) - 1)
                    yield span, trajectory.turns[index]


def policy_samples(groups: Sequence[Group], algorithm: str = "the algorithm"
                   ) -> tuple[list[TurnSample], list[Turn | Span]]:
    """Samples for a policy step *before* advantages are known (advantage 0), with the turn or span each came from:
    env turns in group/trajectory/turn order, then trained spans in `iter_trained_spans` order, then the spans that
    take their turn's advantage (`iter_turn_spans`: summaries); spans without loss
    tokens are left out. `assign_advantages` fills the advantages in once the algorithm has computed them (after
    any reward shaping that needs the samples' log-probs, e.g. a KL penalty in the reward)."""
    owners: list[Turn | Span] = [t for g in groups for traj in g.trajectories for t in traj.turns
                                 if LossRole(t.role).trained]
    owners += list(iter_trained_spans(groups))
    owners += [span for span, _ in iter_turn_spans(groups)]
    pairs = [(TurnSample.from_turn(o, 0.0, algorithm), o) for o in owners]
    pairs = [(s, o) for s, o in pairs if s.num_loss_tokens > 0]
    return [s for s, _ in pairs], [o for _, o in pairs]


def assign_advantages(samples: Sequence[TurnSample], owners: Sequence[Turn | Span], groups: Sequence[Group],
                      advantages: np.ndarray | Sequence[float], span_advantages: np.ndarray | Sequence[float] | None,
                      algorithm: str = "the algorithm") -> None:
    """Set each sample's advantage from the algorithm's flat per-turn (and per-span) advantages, with the checks of
    `samples_from_groups`."""
    by_owner = {id(o): a for o, a in _owner_advantages(groups, advantages, span_advantages, algorithm)}
    for sample, owner in zip(samples, owners, strict=True):
        sample.advantage = float(by_owner[id(owner)])


def _owner_advantages(groups: Sequence[Group], advantages: np.ndarray | Sequence[float],
                      span_advantages: np.ndarray | Sequence[float] | None, algorithm: str
                      ) -> list[tuple[Turn | Span, float]]:
    turns = [t for g in groups for traj in g.trajectories for t in traj.turns]
    advantages = np.asarray(advantages, dtype=np.float64).reshape(-1)
    if len(advantages) != len(turns):
        raise ValueError(f"got {len(advantages)} advantages for {len(turns)} turns; {algorithm} must return one "
                         "advantage per turn, flat in group/trajectory/turn order")
    pairs: list[tuple[Turn | Span, float]] = [(t, float(a)) for t, a in zip(turns, advantages, strict=True)
                                              if LossRole(t.role).trained]
    spans = list(iter_trained_spans(groups))
    if spans:
        if span_advantages is None:
            raise AgentforgeError(f"{algorithm} produced {len(spans)} trained span(s) outside the env turns (e.g. a "
                                  f"{spans[0].kind!r} with role {LossRole(spans[0].role).value}) but no advantages "
                                  "for them; implement Algorithm.span_advantages or give the spans role not_trained")
        span_adv = np.asarray(span_advantages, dtype=np.float64).reshape(-1)
        if len(span_adv) != len(spans):
            raise ValueError(f"got {len(span_adv)} span advantages for {len(spans)} trained spans; {algorithm} must "
                             "return one per trained span, flat in iter_trained_spans order")
        pairs += [(s, float(a)) for s, a in zip(spans, span_adv, strict=True)]
    of_turn = {id(t): a for t, a in pairs}
    pairs += [(span, of_turn.get(id(turn), 0.0)) for span, turn in iter_turn_spans(groups)]
    return pairs


def samples_from_groups(groups: Sequence[Group], advantages: np.ndarray | Sequence[float],
                        span_advantages: np.ndarray | Sequence[float] | None = None,
                        algorithm: str = "the algorithm") -> list[TurnSample]:
    """Samples for a policy step, masked by each span's loss role (never by the algorithm's name).

    `advantages` is flat, one per env turn, in the order `for g in groups for τ in g.trajectories for t in τ.turns`;
    turns whose role is not trained (forced, not trained) take no sample. `span_advantages` is flat over
    `iter_trained_spans(groups)`: a trained span (e.g. a strategy) without one is an error naming `algorithm`.
    Samples without loss tokens (empty or fully forced responses) are dropped: they would cost a forward pass and
    teach nothing."""
    samples = [TurnSample.from_turn(o, a, algorithm)
               for o, a in _owner_advantages(groups, advantages, span_advantages, algorithm)]
    return [s for s in samples if s.num_loss_tokens > 0]


def samples_from_sft(trajectories: Sequence[Trajectory]) -> list[TurnSample]:
    """Supervised samples from (expert or filtered high-reward) trajectories: every turn's sampled response."""
    samples = [TurnSample.for_sft(t.prompt_ids, t.response_ids, t.forced_mask) for traj in trajectories
               for t in traj.turns if LossRole(t.role).trained]
    return [s for s in samples if s.num_loss_tokens > 0]


def total_loss_tokens(samples: Sequence[TurnSample]) -> int:
    return sum(s.num_loss_tokens for s in samples)


def batch_statistics(samples: Sequence[TurnSample]) -> dict[str, float]:
    """What a skipped (non-finite) step reports, so the cause can be found: sizes, advantages, old log-probs."""
    if not samples:
        return {"tokens": 0.0, "samples": 0.0}
    adv = np.concatenate([s.response_advantages()[s.loss_mask[s.prompt_len:]] for s in samples]).astype(np.float64)
    old = np.concatenate([s.old_logprobs[s.loss_mask] for s in samples]) if samples else np.zeros(0)
    finite_adv = adv[np.isfinite(adv)]
    stats = {
        "tokens": float(total_loss_tokens(samples)),
        "samples": float(len(samples)),
        "advantage_nonfinite": float((~np.isfinite(adv)).sum()),
        "old_logprob_nonfinite": float((~np.isfinite(old)).sum()),
    }
    with np.errstate(invalid="ignore"):
        stats.update({
            "advantage_mean": float(adv.mean()),
            "advantage_std": float(adv.std()),
            "advantage_min": float(adv.min()),
            "advantage_max": float(adv.max()),
            "advantage_finite_absmax": float(np.abs(finite_adv).max()) if len(finite_adv) else float("nan"),
            "old_logprob_min": float(old.min()) if len(old) else 0.0,
        })
    return stats
