"""T2PO's rollout hooks: per-token uncertainty on every turn, TTI as the turns' decoding intervention, TDS as the
turns' review (see `algorithms.t2po` for the method).

The turn score s_k is the mean self-calibrated uncertainty M_t over the turn's sampled tokens: tokens TTI forced
are left out (their distribution is the model's, but the token is not its choice, and the model is typically
uncertain right where it is cut off). Each kept turn's s_k is written to its `Turn.info["uncertainty"]`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentforge.engines.interventions import InterventionSpec, register_token_pieces, self_calibrated_uncertainty
from agentforge.errors import AgentforgeError
from agentforge.rollout.hooks import MAX_TURN_ATTEMPTS, RolloutHooks
from agentforge.types import Completion, SamplingConfig

if TYPE_CHECKING:
    from agentforge.rollout.workflow import Episode, RolloutContext

THINK_QUEUE = "</think>\n<action>"  # TTI's forced queue: `</think>`, newline, `<action>`


def think_queue(action_tag: str) -> str:
    """The forced queue for a prompt template's action tag: `</think>`, newline, the opening tag. A template with
    alternative tags (search QA's `search|answer`) gets `</think>\\n<` and the model writes which tag it means."""
    return "</think>\n<" if "|" in action_tag else f"</think>\n<{action_tag}>"


def action_openings(action_tag: str) -> list[str]:
    """The opening tags a turn's action may start with (TTI stops watching once one is written)."""
    return [f"<{tag}>" for tag in action_tag.split("|")]

def tds_regenerates(gamma: float, eta: float, attempt: int, max_try: int) -> bool:
    """Whether TDS discards a turn: 0 < Γ < η and regenerations are left (`attempt` 0 is the first generation).

    The authors' loop (`rollout_loop.py`, `T2PO_multi_turn_loop`): `idx = where((Γ > 0) & (Γ < η))`, regenerate
    those while `regen_attempt < max_try`, then keep what is there. Γ = 0 (an identical score) is kept, as there.
    """
    return 0.0 < gamma < eta and attempt < max_try


def turn_score(completion: Completion, vocab_size: int, alpha: float) -> float:
    """s_k: the mean M_t over the completion's sampled tokens (0 when it has none)."""
    if completion.entropy is None or completion.top_prob is None:
        raise AgentforgeError("T2PO's turn score needs per-token uncertainty: the engine returned none (was "
                              "SamplingConfig.uncertainty set, and is the vLLM engine in-process?)")
    values = [self_calibrated_uncertainty(h, p, vocab_size, alpha)
              for h, p, forced in zip(completion.entropy, completion.top_prob, completion.forced_mask, strict=True)
              if not forced]
    return sum(values) / len(values) if values else 0.0


class T2POHooks(RolloutHooks):
    """TTI on every turn (when enabled), TDS review while training (when enabled), and their counts."""

    name = "t2po"

    def __init__(self, config: Any, tds: bool) -> None:
        """`config`: the algorithm's `T2POConfig` (alpha, tti, tti_epsilon, tti_window, min_think_tokens, eta,
        max_try)."""
        self.config = config
        self.tds = tds
        self._spec: InterventionSpec | None = None
        self._spec_for: int | None = None  # id of the tokenizer the spec was built with
        self.previous: dict[int, float] = {}  # episode slot -> the score of its last kept turn
        self.scores: dict[int, list[float]] = {}  # episode slot -> the kept turns' scores
        self.counts = {"checked": 0, "regenerated": 0, "kept_turns": 0, "tti_fired": 0}
        self.gammas: list[float] = []  # Γ of every first attempt TDS checked (to size η)

    # ---- decoding ----------------------------------------------------------------------------------------------
    def turn_sampling(self, ctx: RolloutContext) -> SamplingConfig:
        return replace(ctx.config.sampling, uncertainty=True)

    def turn_intervention(self, episode: Episode, ctx: RolloutContext) -> InterventionSpec | None:
        if not self.config.tti:
            return ctx.intervention
        if ctx.intervention is not None:
            raise AgentforgeError("algorithm.tti=true is T2PO's decoding intervention; the recipe also sets "
                                  "agent.intervention: drop one of them (one intervention per turn)")
        return self.tti_spec(ctx)

    def tti_spec(self, ctx: RolloutContext) -> InterventionSpec:
        tokenizer = ctx.tokenizer
        if self._spec is None or self._spec_for != id(tokenizer):
            c = self.config
            action_tag = ctx.template.action_tag
            vocab = self.vocab_size(ctx)
            self._spec = InterventionSpec("think_plateau_stop", {
                "queue": tokenizer.encode(think_queue(action_tag), add_special_tokens=False),
                "vocab_size": vocab, "alpha": c.alpha, "epsilon": c.tti_epsilon, "window": c.tti_window,
                "min_think_tokens": c.min_think_tokens, "stop_texts": ["</think>", *action_openings(action_tag)],
                "pieces": register_token_pieces(tokenizer, vocab),
            })
            self._spec_for = id(tokenizer)
        return self._spec

    @staticmethod
    def vocab_size(ctx: RolloutContext) -> int:
        return int(getattr(ctx.engine, "vocab_size", 0) or len(ctx.tokenizer))

    # ---- turn-level dynamic sampling ----------------------------------------------------------------------------
    def before_first_turn(self, episodes: list[Episode], ctx: RolloutContext) -> None:
        self.previous.clear()
        self.scores = {e.slot: [] for e in episodes}
        self.counts = dict.fromkeys(self.counts, 0)
        self.gammas = []

    @property
    def max_turn_attempts(self) -> int:
        """TDS keeps the last of max_try + 1 attempts whatever its score (the authors' loop): no other cap."""
        return max(int(self.config.max_try) + 1, MAX_TURN_ATTEMPTS)

    def review_turns(self, episodes: list[Episode], completions: list[Completion], attempt: int,
                     ctx: RolloutContext) -> list[bool]:
        vocab, alpha = self.vocab_size(ctx), self.config.alpha
        keep = []
        for episode, completion in zip(episodes, completions, strict=True):
            score = turn_score(completion, vocab, alpha)
            previous = self.previous.get(episode.slot)
            regenerate = False
            if self.tds and previous is not None:
                gamma = abs(score - previous)
                if attempt == 0:
                    self.counts["checked"] += 1
                    self.gammas.append(gamma)
                regenerate = tds_regenerates(gamma, self.config.eta, attempt, self.config.max_try)
            if regenerate:
                self.counts["regenerated"] += 1
            else:
                self.previous[episode.slot] = score
                self.scores.setdefault(episode.slot, []).append(score)
                self.counts["kept_turns"] += 1
                self.counts["tti_fired"] += any(completion.forced_mask)
            keep.append(not regenerate)
        return keep

    def after_episodes(self, episodes: list[Episode], ctx: RolloutContext) -> None:
        for episode in episodes:
            for turn, score in zip(episode.trajectory.turns, self.scores.get(episode.slot, []), strict=False):
                turn.info["uncertainty"] = score

    def metrics(self) -> dict[str, float]:
        c = self.counts
        kept = max(1, c["kept_turns"])
        scores = [s for values in self.scores.values() for s in values]
        out = {"t2po/tti_rate": c["tti_fired"] / kept,
               "t2po/turn_uncertainty": sum(scores) / len(scores) if scores else 0.0}
        if self.tds:
            out.update({"t2po/tds_checked": float(c["checked"]), "t2po/tds_regenerated": float(c["regenerated"]),
                        "t2po/tds_rate": c["regenerated"] / max(1, c["checked"])})
            if self.gammas:
                ordered = sorted(self.gammas)
                out["t2po/tds_gamma_median"] = ordered[len(ordered) // 2]
        return out
