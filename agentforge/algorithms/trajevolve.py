"""TrajEvolve: GiGPO advantages with hindsight step credit from counterfactual necessity labels.

After each training rollout the hooks (`trajevolve_rollout`)
label every step of every won episode Necessary or Redundant by replay (`necessity`), and optionally a step
discriminator (`discriminator`) learns those labels and labels the other steps; here the base advantage is GiGPO's,
and a redundant step of a trajectory whose episode advantage A_E is positive gets a non-positive one:

    redundant_credit = zero   → A_t = min(A_t, 0)                          (default, project choice)
                       negate → A_t = min(A_t, −|A_t|) = −|A_t|
                       scale  → A_t = min(A_t, −redundant_scale · |A_t|)  (0 = zero, 1 = negate)
                       none   → A_t unchanged: GiGPO's advantage (with evolve=true: "GiGPO + evolution module")

The min keeps GiGPO's push-down where it was already stronger (a wall bump repeated at one state has a negative
step advantage; replacing it by 0 or −s·|A| would push it down less than GiGPO alone): the paper asks for a
non-positive advantage and is silent on the mapping; this is the one that never raises a redundant step.

Necessary steps, steps of trajectories with A_E ≤ 0 and unlabelled steps (failures, diverged replays) keep GiGPO's
advantage. "Positive-advantage trajectory" is read as A_E > 0 (the trajectory-level part of GiGPO's advantage), so
a group where every rollout wins (A_E = 0) gives no hindsight credit. The default `zero` is the mildest mapping the
paper allows ("non-positive"): it stops rewarding a step the win did not need without pushing it down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from agentforge.algorithms.base import ALGORITHMS, check_bool, check_choice, check_number
from agentforge.algorithms.discriminator import StepDiscriminator
from agentforge.algorithms.evolution import PRUNE, REASONING_MODES, STRATEGIES, EvolutionOptions
from agentforge.algorithms.gigpo import GiGPO, GiGPOConfig
from agentforge.algorithms.necessity import REDUNDANT
from agentforge.algorithms.strategy_selection import BUNDLED_MODEL, require_embedding
from agentforge.errors import ConfigError
from agentforge.objective.turns import TurnBatch, iter_turns
from agentforge.types import Group

if TYPE_CHECKING:
    from agentforge.rollout.hooks import RolloutHooks

REDUNDANT_CREDITS = ("zero", "negate", "scale", "none")


@dataclass
class TrajEvolveConfig(GiGPOConfig):
    """GiGPO's options plus TrajEvolve's. `counterfactual`: replay labels on won training episodes; `verify_replay`:
    check each replay reproduces the logged episode first (diverged ones are skipped and counted); `verify_pruned`:
    replay each labelled episode's necessary steps alone and record whether they still win (the prune strategy's
    verification, logged; evolved samples are not built yet); `eval_labels`:
    label eval episodes too (replays cost env time; the step counts are reported either way). `discriminator`: the
    step discriminator (`algorithms.discriminator`) learns from the replay labels while training and labels the
    steps they do not reach. `evolve`: trajectory evolution while training (`algorithms.evolution`): the
    `evolve_strategies` (prune, branch; in priority order) build at most `evolve_max_per_group` extra samples per task
    group; `evolve_reasoning`: `regenerate` the reasoning of a pruned sequence's actions with the think-only prompt,
    or `reuse` the original responses."""

    option_help: ClassVar[dict[str, str]] = {
        **GiGPOConfig.option_help,
        'counterfactual': 'replay labels on won training episodes (needs an env that replays deterministically)',
        'verify_replay': 'replay the logged actions first; an episode the env does not reproduce is skipped',
        'verify_pruned': "replay each labelled episode's necessary steps alone: do they still win? (prune check)",
        'redundant_credit': "zero | negate | scale | none: A_t = min(A_t, -s|A_t|) on redundant steps (none: GiGPO's)",
        'redundant_scale': 's for redundant_credit=scale, in [0, 1]',
        'eval_labels': 'label eval episodes too (env time); step counts are reported either way',
        'evolve': 'trajectory evolution while training',
        'evolve_strategies': 'prune | branch, in priority order; prune needs counterfactual + verify_pruned',
        'evolve_max_per_group': 'evolved samples per task group at most',
        'evolve_reasoning': 'regenerate (think-only prompt for each kept action) | reuse (original responses)',
        'discriminator': 'a step discriminator trained on replay labels labels the other steps',
    }


    counterfactual: bool = True
    verify_replay: bool = True
    verify_pruned: bool = True
    redundant_credit: str = "zero"
    redundant_scale: float = 0.5
    eval_labels: bool = False
    evolve: bool = True
    evolve_strategies: list[str] = field(default_factory=lambda: list(STRATEGIES))
    evolve_max_per_group: int = 2
    evolve_reasoning: str = "regenerate"
    discriminator: bool = False


@ALGORITHMS.register("trajevolve")
class TrajEvolve(GiGPO):
    """GiGPO plus hindsight credit on replay-labelled redundant steps (see the module doc)."""

    name = "trajevolve"
    not_asynchronous = ("its necessity labels replay each trajectory in the env pool and its evolved turns are "
                        "scored by the engine after the rollout, both against the weights that sampled them; "
                        "with rollout ahead of the learner those weights are gone (not built)")
    not_gateway = ("its necessity labels replay each trajectory's actions in the env pool and its evolved turns "
                   "regenerate reasoning for a fixed action; an external agent's tools and env cannot be replayed "
                   "by the trainer")
    config_class = TrajEvolveConfig
    config: TrajEvolveConfig

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # the step discriminator learns across iterations, so it lives with the algorithm, not the per-run hooks
        self.discriminator = StepDiscriminator() if self.config.discriminator else None

    def validate(self) -> None:
        super().validate()
        c = self.config
        for option in ("counterfactual", "verify_replay", "verify_pruned", "eval_labels", "evolve", "discriminator"):
            check_bool(self.name, option, getattr(c, option))
        check_choice(self.name, "redundant_credit", c.redundant_credit, REDUNDANT_CREDITS)
        check_number(self.name, "redundant_scale", c.redundant_scale, low=0.0, high=1.0)
        check_choice(self.name, "evolve_reasoning", c.evolve_reasoning, REASONING_MODES)
        strategies = list(c.evolve_strategies or [])
        unknown = [s for s in strategies if s not in STRATEGIES]
        if unknown or not strategies or len(set(strategies)) != len(strategies):
            raise ConfigError(f"algorithm 'trajevolve': evolve_strategies={strategies} must be a non-empty list of "
                              f"distinct strategies from {list(STRATEGIES)}, e.g. algorithm.evolve_strategies=[prune]")
        if isinstance(c.evolve_max_per_group, bool) or not isinstance(c.evolve_max_per_group, int) \
                or c.evolve_max_per_group < 1:
            raise ConfigError(f"algorithm 'trajevolve': evolve_max_per_group must be an integer >= 1, got "
                              f"{c.evolve_max_per_group!r}; to build no evolved samples set algorithm.evolve=false")
        if c.evolve and not self.evolve_strategies:
            raise ConfigError("algorithm 'trajevolve': the prune strategy needs the replay labels and the pruned "
                              "replay (algorithm.counterfactual=true algorithm.verify_pruned=true); without them "
                              "evolve by branching: algorithm.evolve_strategies=[branch], or algorithm.evolve=false")
        if c.discriminator:
            require_embedding(BUNDLED_MODEL)

    def check_run(self, run: dict[str, Any]) -> None:
        """Pruned trajectories take their old log-probs from `engine.score` (prompt log-probs), which engines compute
        from the untempered logits: at a sampling temperature other than 1 the learner must recompute them."""
        temperature = float(run.get("agent", {}).get("sampling", {}).get("temperature", 1.0))
        recompute = run.get("learner", {}).get("old_logprobs", "engine") == "recompute"
        if self.config.evolve and PRUNE in self.evolve_strategies and temperature != 1.0 and not recompute:
            raise ConfigError(f"algorithm 'trajevolve': pruned trajectories are scored by the engine at temperature 1 "
                              f"but agent.sampling.temperature={temperature}; set learner.old_logprobs=recompute (the "
                              "learner computes every old log-prob at the sampling temperature), or sample at 1.0")

    def state_dict(self) -> dict[str, Any]:
        return {"discriminator": self.discriminator.state_dict()} if self.discriminator is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.discriminator is not None and "discriminator" in state:
            self.discriminator.load_state_dict(state["discriminator"])

    def rollout_hooks(self, purpose: str) -> RolloutHooks:
        """Training: replay labels (with `counterfactual`). Eval and `agentforge rollout`: the step counts, and
        labels only with `eval_labels`."""
        from agentforge.algorithms.trajevolve_rollout import TrajEvolveHooks, TrajEvolveRolloutOptions

        c = self.config
        label = bool(c.counterfactual) and (purpose == "train" or bool(c.eval_labels))
        evolution = (EvolutionOptions(self.evolve_strategies, int(c.evolve_max_per_group), c.evolve_reasoning)
                     if c.evolve and purpose == "train" else None)
        options = TrajEvolveRolloutOptions(label=label, verify=bool(c.verify_replay),
                                           verify_pruned=bool(c.verify_pruned),
                                           discriminate=bool(c.discriminator) and purpose == "train",
                                           evolution=evolution)
        return TrajEvolveHooks(options, self.discriminator)

    def advantages(self, groups: Sequence[Group]) -> np.ndarray:
        batch = TurnBatch.from_groups(groups)
        base = self.compute(batch)
        redundant = np.fromiter((turn.info.get("necessity") == REDUNDANT for turn in iter_turns(groups)), dtype=bool,
                                count=batch.n_turns)
        advantages = (base if self.config.redundant_credit == "none"
                      else hindsight_credit(base, self.episode_advantages(batch), redundant, self.credit_scale))
        self.last_metrics.update(credit_metrics(base, advantages, redundant))
        return advantages

    @property
    def evolve_strategies(self) -> tuple[str, ...]:
        """The strategies that can run: prune needs the replay labels and the pruned replay, so without them
        (counterfactual=false, the discriminator-only fallback) evolution branches only."""
        c = self.config
        return tuple(s for s in c.evolve_strategies if s != PRUNE or (c.counterfactual and c.verify_pruned))

    @property
    def credit_scale(self) -> float:
        """s in A_t = min(A_t, −s·|A_t|) for a redundant step of a positive-advantage trajectory."""
        return {"zero": 0.0, "negate": 1.0}.get(self.config.redundant_credit, float(self.config.redundant_scale))


def hindsight_credit(advantages: np.ndarray, episode: np.ndarray, redundant: np.ndarray, scale: float) -> np.ndarray:
    """Per turn: min(A, −scale·|A|) where the turn is redundant and its trajectory's episode advantage is positive
    (never above what GiGPO gave it), else A."""
    hit = redundant & (episode > 0)
    out = advantages.astype(np.float64, copy=True)
    out[hit] = np.minimum(advantages[hit], -scale * np.abs(advantages[hit]))
    return out


def credit_metrics(base: np.ndarray, advantages: np.ndarray, redundant: np.ndarray) -> dict[str, float]:
    changed = base != advantages
    return {
        "redundant_turn_fraction": float(redundant.mean()) if redundant.size else 0.0,
        "hindsight_credited_turns": float(changed.sum()),
        "hindsight_adv_shift_mean": float((advantages - base).mean()) if base.size else 0.0,
    }
