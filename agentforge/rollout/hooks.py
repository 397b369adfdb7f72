"""`RolloutHooks`: where an algorithm changes how the default multi-turn workflow plays episodes.

Each hook sees a batch of episodes at once, so the generations it adds (a strategy per episode, a judgment per
finished episode) go to the engine in one batched call through `RolloutContext.generate(..., extra=True)`. The
defaults reproduce plain multi-turn play exactly.

- `plan`: which episodes to play for the tasks (default: each task `group_size` times; StraTA: N strategies × M).
- `before_first_turn`: after reset (and any replayed prefix), before turn 1 (e.g. write a strategy, add it to
  `Episode.notes`, record it as a span with a trained role).
- `turn_intervention`: the decoding intervention for an episode's next turn (default: the recipe's).
- `turn_sampling`: the sampling config of the env turns (default: the recipe's; T2PO asks for per-token uncertainty).
- `review_turns`: after a turn is generated and before the env steps: keep it, or discard it and generate it again
  from the same state (the discarded attempt is kept as a NOT_TRAINED span and counted).
- `after_episodes`: when every episode has ended (e.g. judge each trajectory, adjust rewards, label steps).
- `metrics`: what the hooks counted in the last run, logged with the rollout's own metrics (`train/…`, `eval/…`).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentforge.engines.interventions import InterventionSpec
from agentforge.rollout.workflow import Episode, EpisodePlan, RolloutContext
from agentforge.types import Completion, SamplingConfig, Task

# A turn may be generated this many times at most unless the hooks bound it themselves (`max_turn_attempts`): a
# hook that never accepts must not hang.
MAX_TURN_ATTEMPTS = 16


class RolloutHooks:
    """No-op hooks: plain multi-turn play. Subclass and override what the algorithm changes."""

    name: str = "default"

    def plan(self, tasks: Sequence[Task], group_size: int) -> list[EpisodePlan]:
        return [EpisodePlan(task, rollout_index=i, group=g) for g, task in enumerate(tasks) for i in range(group_size)]

    def before_first_turn(self, episodes: list[Episode], ctx: RolloutContext) -> None:
        """Called once, after every episode was reset (and its prefix replayed)."""

    def turn_intervention(self, episode: Episode, ctx: RolloutContext) -> InterventionSpec | None:
        return ctx.intervention

    def turn_sampling(self, ctx: RolloutContext) -> SamplingConfig:
        return ctx.config.sampling

    @property
    def max_turn_attempts(self) -> int:
        """How many times one turn may be generated before the workflow gives up (hooks whose review is bounded by
        their own option, like T2PO's max_try, say so here)."""
        return MAX_TURN_ATTEMPTS

    def review_turns(self, episodes: list[Episode], completions: list[Completion], attempt: int,
                     ctx: RolloutContext) -> list[bool]:
        """True keeps a generated turn; False discards it and generates it again from the same prompt. `attempt` is
        0 for the first generation of this turn, 1 for the first regeneration, ..."""
        return [True] * len(episodes)

    def after_episodes(self, episodes: list[Episode], ctx: RolloutContext) -> None:
        """Called once when every episode has ended, before the groups are returned."""

    def metrics(self) -> dict[str, float]:
        return {}
