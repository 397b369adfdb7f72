"""Per-request decoding interventions, defined once and shared by both rollout engines.

An `Intervention` is a small per-request state machine that, at each decoding step, may force the next token
(e.g. close a runaway `<think>` with `</think>\\n<action>`). The engines adapt it to their logits-processor APIs:
`hf_engine.InterventionLogitsProcessor` (a transformers `LogitsProcessor` over a padded batch) and
`vllm_engine.VLLMInterventionProcessor` (vLLM's V1 batch-level `LogitsProcessor`). Both call `Intervention.step`
with the request's output ids so far and its raw logits row, so an intervention behaves identically in both.

Forcing sets every logit of the row to -inf except the forced token. Forced positions are recorded on the
instance and come back as `Completion.forced_mask`: those tokens were not sampled and must be masked out of the
policy loss (their reported log-probs are the model's raw values).

The adapters may call `forced_token` more than once for the same position (vLLM evaluates logits for a partial
prefill and then discards the sample); interventions therefore decide from `len(output_ids)`, never by counting
calls, so a repeated call gives the same answer. One that reads the logits (an entropy trigger) must let a repeated
call for a position decide again: the last call's row is the one whose sample is kept.

Per-token uncertainty (`SamplingConfig.uncertainty`): `next_token_uncertainty` turns raw logits rows into each
row's entropy (nats) and top probability. The engines record it per generated token through it (vLLM in its
logits processor, keyed by output position in an `UncertaintyRecord`; HF from `generate`'s raw logits), and an
intervention reads the current step's values with `Intervention.current_uncertainty(logits)`: set
`wants_uncertainty = True` on the class and the adapters compute them batched with the recorded rows, so a
T2PO-style trigger costs no extra softmax.

vLLM passes only serialisable data per request (`SamplingParams.extra_args`), so the engine registers each
request's live `DecodingHooks` (its intervention and/or uncertainty record) in a module-level side channel
(`ACTIVE`) under a per-request key and sends the key; the logits processor looks it up. Requests with neither
send no key and cost the processor nothing. That needs the processor to run in the engine's process:
interventions and uncertainty need the in-process vLLM engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, engine option
`in_process=True`).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from agentforge.errors import AgentforgeError, ConfigError
from agentforge.registry import Registry

# The `SamplingParams.extra_args` key that carries the side-channel key of a request's `DecodingHooks`.
EXTRA_ARGS_KEY = "agentforge_decoding"


def next_token_uncertainty(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Entropy (nats) and top probability of softmax(logits) per row (any leading dims), computed in fp32.

    One vectorised pass over a batch of rows: what both engines record per generated token and what
    `Intervention.current_uncertainty` returns. Pass raw logits (before penalties, temperature, top-k/p, forcing).
    Masked (-inf) entries count as probability 0, not NaN.

    One softmax of the max-shifted logits z = x − max(x) and no log-softmax: p_max = exp(−logsumexp(z)), so
    H = −log p_max − Σ p·z. Shifting first keeps the two terms small (unshifted, logsumexp(x) and Σ p·x are both near
    max(x) and their difference cancels digits). Measured against fp64 on 64 rows of Gaussian logits: max error 2.5e-5
    nats at |V| = 151,936 and logit scale 5 (a plain fp32 log_softmax: 5.2e-5; the unshifted form was 3.1e-4, 7.3e-4
    with logits offset by +30), 5e-6 at |V| = 49,152 (SmolLM2's). About 20 % slower than the unshifted form, still
    cheaper than softmax + log_softmax.
    """
    logits = logits.float()
    shifted = (logits - logits.amax(-1, keepdim=True)).clamp(min=torch.finfo(torch.float32).min)
    probs = shifted.softmax(-1)
    top_prob = probs.amax(-1)
    return -top_prob.log() - (probs * shifted).sum(-1), top_prob


class UncertaintyRecord:
    """One request's per-token entropy and top probability, keyed by output position.

    Keyed, not appended: vLLM may evaluate a row more than once for the same position (a partial prefill's sample
    is discarded), and the later call, the one whose sample is kept, overwrites the earlier.
    """

    def __init__(self) -> None:
        self.values: dict[int, tuple[float, float]] = {}

    def record(self, position: int, entropy: float, top_prob: float) -> None:
        self.values[position] = (entropy, top_prob)

    def lists(self, length: int) -> tuple[list[float], list[float]]:
        """(entropy, top_prob) of the first `length` generated tokens; a gap is an engine bug, not a value."""
        missing = [i for i in range(length) if i not in self.values]
        if missing:
            raise AgentforgeError(
                f"no uncertainty was recorded for output positions {missing[:5]} of {length}: the logits processor "
                "did not see those steps (is the in-process vLLM engine running agentforge's processor?)"
            )
        pairs = [self.values[i] for i in range(length)]
        return [h for h, _ in pairs], [p for _, p in pairs]


@dataclass
class InterventionSpec:
    """A serialisable description of one request's intervention: a registered `kind` and its constructor params."""

    kind: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InterventionSpec:
        return cls(kind=str(data["kind"]), params=dict(data.get("params", {})))


class Intervention:
    """Base class: override `forced_token`. One instance lives for one request's generation."""

    kind: ClassVar[str] = ""
    # True: the adapters compute this row's entropy/top-prob with the batch each step (see current_uncertainty)
    wants_uncertainty: ClassVar[bool] = False
    _step_uncertainty: tuple[float, float] | None = None  # set by `step` for the duration of `forced_token`

    def __init__(self) -> None:
        self.forced_positions: set[int] = set()

    def forced_token(self, output_ids: Sequence[int], logits: torch.Tensor) -> int | None:
        """Called once per decoding step with the request's output ids so far and its raw logits row
        (before penalties and temperature). Return a token id to emit without sampling, or None."""
        raise NotImplementedError

    def current_uncertainty(self, logits: torch.Tensor) -> tuple[float, float]:
        """(entropy in nats, top probability) of this step's raw next-token distribution, for `forced_token`.

        The adapter's batched values when it computed them (`wants_uncertainty`, or the request records
        uncertainty); otherwise computed here from the row.
        """
        if self._step_uncertainty is not None:
            return self._step_uncertainty
        entropy, top_prob = next_token_uncertainty(logits)
        return float(entropy), float(top_prob)

    def step(
        self, output_ids: Sequence[int], logits: torch.Tensor, uncertainty: tuple[float, float] | None = None
    ) -> bool:
        """Adapter entry point: ask for a forced token and, if any, force it in `logits` (one row) in place.

        `uncertainty` is the row's (entropy, top_prob) when the adapter already computed it this step.
        """
        self._step_uncertainty = uncertainty
        try:
            token = self.forced_token(output_ids, logits)
        finally:
            self._step_uncertainty = None
        if token is None:
            # a repeated call for this position may decide differently (an intervention reading the logits, e.g.
            # an entropy trigger, saw a discarded partial prefill's row first): the last call's decision stands
            self.forced_positions.discard(len(output_ids))
            return False
        vocab = logits.shape[-1]
        if not 0 <= token < vocab:
            raise AgentforgeError(f"intervention {self.kind!r} forced token id {token}, outside the vocab [0, {vocab})")
        logits.fill_(float("-inf"))
        logits[token] = 0.0
        self.forced_positions.add(len(output_ids))
        return True

    def forced_mask(self, length: int) -> list[bool]:
        """The forced flags of a completion of `length` tokens."""
        return [i in self.forced_positions for i in range(length)]


INTERVENTIONS: Registry[type[Intervention]] = Registry("intervention")


def build_intervention(spec: InterventionSpec | Mapping[str, Any]) -> Intervention:
    """Construct a fresh intervention (fresh state) from its spec; bad params give an error naming them."""
    if not isinstance(spec, InterventionSpec):
        spec = InterventionSpec.from_dict(spec)
    cls = INTERVENTIONS.get(spec.kind)
    try:
        return cls(**spec.params)
    except TypeError as exc:
        raise ConfigError(f"bad params for intervention {spec.kind!r}: {exc}; got {sorted(spec.params)}") from exc


def _contains(haystack: Sequence[int], needle: Sequence[int]) -> bool:
    n = len(needle)
    if n == 0:
        return False
    first = needle[0]
    return any(haystack[i] == first and list(haystack[i : i + n]) == list(needle) for i in range(len(haystack) - n + 1))


def _token_ids(value: Any, what: str) -> list[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"{what} must be a list of token ids (tokenize the text first), got {value!r}")
    ids = [int(v) for v in value]
    if any(v < 0 for v in ids):
        raise ConfigError(f"{what} holds negative token ids: {ids}")
    return ids


@INTERVENTIONS.register("force_sequence")
class ForceSequence(Intervention):
    """Force `sequence` once the output has `after_tokens` tokens, unless `unless_emitted` already appears.

    Fires at most once; the queued tokens are then emitted one per step (truncated if the budget runs out).
    Example: force `</think>\\n<action>` after 200 tokens unless `</think>` was already written.
    """

    kind = "force_sequence"

    def __init__(self, sequence: Sequence[int], after_tokens: int, unless_emitted: Sequence[int] | None = None):
        super().__init__()
        self.sequence = _token_ids(sequence, "force_sequence.sequence")
        if not self.sequence:
            raise ConfigError("force_sequence.sequence is empty; give the token ids to force")
        self.after_tokens = int(after_tokens)
        if self.after_tokens < 0:
            raise ConfigError(f"force_sequence.after_tokens must be >= 0, got {after_tokens}")
        self.unless_emitted = _token_ids(unless_emitted, "force_sequence.unless_emitted") if unless_emitted else []
        self.start: int | None = None  # output position of the first forced token, once fired
        self.suppressed = False

    def forced_token(self, output_ids: Sequence[int], logits: torch.Tensor) -> int | None:
        n = len(output_ids)
        if self.start is None:
            if self.suppressed or n < self.after_tokens:
                return None
            if _contains(output_ids, self.unless_emitted):
                self.suppressed = True  # the output only grows, so it stays suppressed
                return None
            self.start = n
        offset = n - self.start
        return self.sequence[offset] if 0 <= offset < len(self.sequence) else None


@INTERVENTIONS.register("slot_fill")
class SlotFill(Intervention):
    """Fill a fixed template: force `prefix`, sample `free` tokens, force `suffix` (then sampling resumes).

    A format scaffold: a model that cannot yet write the action format still produces parseable turns, and only
    its own sampled tokens carry loss (the forced ones are masked). Example: prefix `<action>`, free 1, suffix
    `</action><|im_end|>`.
    """

    kind = "slot_fill"

    def __init__(self, prefix: Sequence[int], free: int, suffix: Sequence[int] | None = None):
        super().__init__()
        self.prefix = _token_ids(prefix, "slot_fill.prefix")
        self.free = int(free)
        if self.free < 0:
            raise ConfigError(f"slot_fill.free must be >= 0, got {free}")
        self.suffix = _token_ids(suffix, "slot_fill.suffix") if suffix else []

    def forced_token(self, output_ids: Sequence[int], logits: torch.Tensor) -> int | None:
        n = len(output_ids)
        if n < len(self.prefix):
            return self.prefix[n]
        offset = n - len(self.prefix) - self.free
        return self.suffix[offset] if 0 <= offset < len(self.suffix) else None


def self_calibrated_uncertainty(entropy: Any, top_prob: Any, vocab_size: int, alpha: float) -> Any:
    """T2PO's per-token signal M = α·H/log|V| + (1 − α)·(1 − p_max), in [0, 1] (floats, arrays or tensors).

    Entropy alone is blind to how the top probability is split off; confidence alone to how the rest is spread:
    the mix tells apart distributions either one would call equal. `vocab_size` is |V|, the logits row width.
    """
    if vocab_size < 2:
        raise ConfigError(f"self-calibrated uncertainty needs a vocabulary of 2+ tokens, got {vocab_size}")
    return alpha * (entropy / math.log(vocab_size)) + (1.0 - alpha) * (1.0 - top_prob)


TOKEN_PIECES: dict[str, list[str]] = {}  # key -> each token id's text, for interventions that watch the output text


def register_token_pieces(tokenizer: Any, vocab_size: int | None = None) -> str:
    """Publish `tokenizer`'s per-token texts once (0.4 s for 49k tokens) and return their key.

    Interventions that watch for a tag must read text, not token sequences: BPE merges a tag's characters with its
    neighbours' (SmolLM2 writes `</think><action>` as `</`, `think`, `><`, `action`, `>`), so no fixed id sequence
    marks it. In-process engines only (as every intervention).
    """
    key = f"{type(tokenizer).__name__}:{getattr(tokenizer, 'name_or_path', '')}:{len(tokenizer)}:{vocab_size}"
    if key not in TOKEN_PIECES:
        pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        TOKEN_PIECES[key] = pieces + [""] * max(0, (vocab_size or 0) - len(pieces))
    return key


def ensure_token_pieces(specs: Sequence[InterventionSpec | None] | None, tokenizer: Any) -> None:
    """Engines in other processes (replicas): the token texts a spec names by key were registered in the trainer's
    process only; register them here, under that key, from this engine's own tokenizer (the same model files)."""
    for spec in specs or []:
        key = spec.params.get("pieces") if spec is not None else None
        if not isinstance(key, str) or key in TOKEN_PIECES:
            continue
        _, length, vocab = key.rsplit(":", 2)
        if int(length) != len(tokenizer):
            raise AgentforgeError(f"the intervention's token texts were made for a tokenizer of {length} tokens "
                                  f"({key!r}), but this engine's has {len(tokenizer)}: the trainer and the engine "
                                  "replicas must load the same model")
        pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        TOKEN_PIECES[key] = pieces + [""] * max(0, (0 if vocab == "None" else int(vocab)) - len(pieces))


@INTERVENTIONS.register("think_plateau_stop")
class ThinkPlateauStop(Intervention):
    """T2PO's token-level thinking intervention (TTI): end the thinking once its uncertainty stops moving.

    Per step t (output position), M_t = self-calibrated uncertainty of the raw next-token distribution. Once the
    output has at least `min_think_tokens` tokens and |M_t − M_{t−1}| < `epsilon` held for `window` consecutive
    steps, the `queue` (the ids of `</think>`, newline, `<action>`) is forced, one token per step, and sampling
    resumes for the action. It watches only the thinking: once the output text holds any of `stop_texts` (`</think>`,
    the action's opening tag), read through the token texts registered under `pieces`, it stops for good. Fires at
    most once.

    State is keyed by output position (M and the streak of small changes ending there), so a repeated call for a
    position (vLLM's discarded partial-prefill sample) decides again from the same history.
    """

    kind = "think_plateau_stop"
    wants_uncertainty = True

    def __init__(self, queue: Sequence[int], vocab_size: int, alpha: float = 0.4, epsilon: float = 0.05,
                 window: int = 4, min_think_tokens: int = 32, stop_texts: Sequence[str] = (),
                 pieces: str | None = None) -> None:
        super().__init__()
        self.queue = _token_ids(queue, "think_plateau_stop.queue")
        if not self.queue:
            raise ConfigError("think_plateau_stop.queue is empty; give the ids of '</think>\\n<action>'")
        self.vocab_size = int(vocab_size)
        self.alpha, self.epsilon = float(alpha), float(epsilon)
        self.window, self.min_think_tokens = int(window), int(min_think_tokens)
        if not 0.0 <= self.alpha <= 1.0 or self.epsilon < 0 or self.window < 1 or self.min_think_tokens < 0:
            raise ConfigError(f"think_plateau_stop: need alpha in [0, 1], epsilon >= 0, window >= 1, "
                              f"min_think_tokens >= 0; got {alpha}, {epsilon}, {window}, {min_think_tokens}")
        self.stop_texts = [str(t).lower() for t in stop_texts if t]
        if self.stop_texts and pieces not in TOKEN_PIECES:
            raise ConfigError("think_plateau_stop.stop_texts needs the tokenizer's token texts: pass "
                              "pieces=register_token_pieces(tokenizer)")
        self.pieces = TOKEN_PIECES[pieces] if self.stop_texts and pieces is not None else []
        self.keep = max((len(t) for t in self.stop_texts), default=0) + 16  # text tail long enough for a tag
        self.tail, self.read = "", 0  # the output text's tail and how many output tokens it covers
        self.signal: dict[int, float] = {}  # output position -> M
        self.streak: dict[int, int] = {}  # output position -> consecutive small changes ending there
        self.start: int | None = None  # output position of the first forced token, once fired
        self.stopped = False

    def _closed(self, output_ids: Sequence[int]) -> bool:
        """Whether the output text so far holds a stop text (read incrementally; the output only grows)."""
        if not self.stop_texts:
            return False
        pieces = self.pieces
        for token in output_ids[self.read:]:
            self.tail = (self.tail + (pieces[token] if 0 <= token < len(pieces) else "")).lower()[-self.keep:]
            if any(stop in self.tail for stop in self.stop_texts):
                return True
        self.read = len(output_ids)
        return False

    def forced_token(self, output_ids: Sequence[int], logits: torch.Tensor) -> int | None:
        n = len(output_ids)
        if self.start == n:
            self.start = None  # a repeated call for the firing position decides again
        if self.start is not None:
            offset = n - self.start
            return self.queue[offset] if 0 <= offset < len(self.queue) else None
        if self.stopped:
            return None
        if self._closed(output_ids):
            self.stopped = True  # the model closed its thinking (or began the action) itself
            return None
        entropy, top_prob = self.current_uncertainty(logits)
        signal = self_calibrated_uncertainty(entropy, top_prob, self.vocab_size, self.alpha)
        self.signal[n] = signal
        previous = self.signal.get(n - 1)
        small = previous is not None and abs(signal - previous) < self.epsilon
        self.streak[n] = self.streak.get(n - 1, 0) + 1 if small else 0
        if n >= self.min_think_tokens and self.streak[n] >= self.window:
            self.start = n
            return self.queue[0]
        return None

    @property
    def fired(self) -> bool:
        return self.start is not None


# ------------------------------------------------------------------------------------------- vLLM side channel


@dataclass
class DecodingHooks:
    """What one vLLM request asks of the logits processor: an intervention, an uncertainty record, or both."""

    intervention: Intervention | None = None
    uncertainty: UncertaintyRecord | None = None

    @property
    def active(self) -> bool:
        """Whether the processor has anything to do for this request (else it is not registered at all)."""
        return self.intervention is not None or self.uncertainty is not None

    @property
    def measures_uncertainty(self) -> bool:
        """Whether the processor must compute this row's entropy/top-prob each step."""
        return self.uncertainty is not None or (self.intervention is not None and self.intervention.wants_uncertainty)


ACTIVE: dict[str, DecodingHooks] = {}


def register_active(hooks: DecodingHooks) -> str:
    """Publish a request's live hooks for the in-process vLLM logits processor; returns its per-request key."""
    key = uuid.uuid4().hex
    ACTIVE[key] = hooks
    return key


def lookup_active(key: str) -> DecodingHooks:
    try:
        return ACTIVE[key]
    except KeyError:
        raise AgentforgeError(
            "a vLLM request carries decoding hooks (an intervention or uncertainty) the logits processor cannot "
            "find: they need the in-process vLLM engine (engine option in_process=True, i.e. "
            "VLLM_ENABLE_V1_MULTIPROCESSING=0)"
        ) from None


def release_active(key: str) -> DecodingHooks | None:
    return ACTIVE.pop(key, None)
