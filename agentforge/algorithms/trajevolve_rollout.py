"""TrajEvolve's rollout hooks: counterfactual necessity labels after the episodes, and the redundancy report.

- `before_first_turn`: an env that cannot replay is refused before the first generation (the error names the env
  and the discriminator-only fallback), not after a whole rollout.
- `after_episodes`: every won episode is labelled by replay (`algorithms.necessity`, batched over the pool's
  workers). Each turn gets `info["necessity"]` (necessary | redundant), `info["necessity_by"]` (replay, dependent,
  not_executed, no_op) and `info["dep"]` (Dep(t): 0-based turn indices); the trajectory gets `meta["necessity"]`
  (status, redundant turn indices, replays, divergence, and `pruned_wins`: whether its necessary steps alone still
  win, checked by one more replay — the verification half of the prune strategy). A diverged episode gets no labels,
  only its status.
- with the step discriminator (`algorithm.discriminator`, training only; `algorithms.discriminator`): it is scored
  on this rollout's replay labels before it learns them (held-out accuracy), trained on them, then labels the steps
  of episodes without replay labels (failures, diverged ones): `info["necessity_by"] = "discriminator"`.
- with evolution (`algorithm.evolve`, training only; `algorithms.evolution`): after labelling, pruned and branched
  trajectories are built from this rollout's episodes and appended to their groups (`meta["evolved"]`).
- `metrics`: the paper's redundancy table (mean steps over all and over successful trajectories) and the labelling's
  own counts, logged as `train/trajevolve/...` and `eval/trajevolve/...`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentforge.algorithms.discriminator import StepDiscriminator
from agentforge.algorithms.evolution import EvolutionOptions, evolve
from agentforge.algorithms.necessity import (
    BY_DEPENDENCE,
    BY_REPLAY,
    DIVERGED,
    LABELLED,
    NECESSARY,
    NO_OP,
    NOT_EXECUTED,
    REDUNDANT,
    carried_out,
    executed,
    label_necessity,
    replay_pruned,
    require_replayable,
)
from agentforge.envs.replay import ReplayResult
from agentforge.rollout.hooks import RolloutHooks
from agentforge.rollout.metrics import ratio
from agentforge.rollout.workflow import Episode, EpisodePlan, RolloutContext
from agentforge.types import Observation, Task, Trajectory

BY_DISCRIMINATOR = "discriminator"


@dataclass(frozen=True)
class TrajEvolveRolloutOptions:
    """`label`: compute replay labels in this run (training, or eval with `algorithm.eval_labels`); `verify`: one
    verification replay per trajectory first (diverged episodes are skipped); `verify_pruned`: one more replay of
    each labelled episode's necessary steps alone (the prune strategy's check); `evolution`: build evolved samples
    (training only; None: no evolution)."""

    label: bool = True
    verify: bool = True
    verify_pruned: bool = True
    discriminate: bool = False
    evolution: EvolutionOptions | None = None


class TrajEvolveHooks(RolloutHooks):
    """Counterfactual labels after the episodes and TrajEvolve's redundancy metrics (see the module doc)."""

    name = "trajevolve"

    def __init__(self, options: TrajEvolveRolloutOptions, discriminator: StepDiscriminator | None = None) -> None:
        self.options = options
        self.discriminator = discriminator
        self._counts: dict[str, float] = defaultdict(float)

    def plan(self, tasks: Sequence[Task], group_size: int) -> list[EpisodePlan]:
        self._counts = defaultdict(float)
        return super().plan(tasks, group_size)

    def before_first_turn(self, episodes: list[Episode], ctx: RolloutContext) -> None:
        if self.options.label:
            require_replayable(ctx.pool)

    def after_episodes(self, episodes: list[Episode], ctx: RolloutContext) -> None:
        c = self._counts
        for episode in episodes:
            trajectory = episode.trajectory
            c["episodes"] += 1
            c["steps"] += trajectory.length
            if trajectory.won:
                c["won"] += 1
                c["won_steps"] += trajectory.length
        won = [e for e in episodes if e.trajectory.won and e.trajectory.turns]
        pruned = self._label(won, ctx) if self.options.label and won else {}
        if self.options.discriminate and self.discriminator is not None:
            self._discriminate([e.trajectory for e in episodes if e.trajectory.turns])
        if self.options.evolution is not None:
            self._evolve(episodes, pruned, ctx)

    def _label(self, won: list[Episode], ctx: RolloutContext) -> dict[int, ReplayResult]:
        """Replay labels on the won episodes; returns the replays of their pruned sequences by episode slot."""
        c = self._counts
        trajectories = [e.trajectory for e in won]
        results = label_necessity(ctx.pool, trajectories, verify=self.options.verify)
        replays = (replay_pruned(ctx.pool, trajectories, results) if self.options.verify_pruned
                   else [None] * len(won))
        for episode, result, replayed in zip(won, results, replays, strict=True):
            trajectory = episode.trajectory
            trajectory.meta["necessity"] = {"status": result.status, "redundant": result.redundant,
                                            "replays": result.replays}
            if replayed is not None:
                trajectory.meta["necessity"]["pruned_wins"] = replayed.won
                c["pruned"] += 1
                c["pruned_wins"] += replayed.won
            c["replays"] += result.replays
            c["label_attempts"] += 1
            if result.status == DIVERGED:
                trajectory.meta["necessity"]["divergence"] = result.divergence
                c["diverged"] += 1
                continue
            if result.status != LABELLED:
                continue
            for turn, label, reason, dep in zip(trajectory.turns, result.labels, result.reasons, result.dependents,
                                                strict=True):
                turn.info.update(necessity=label, necessity_by=reason, dep=dep)
            c["labelled"] += 1
            c["labelled_steps"] += trajectory.length
            c["redundant_steps"] += sum(label == REDUNDANT for label in result.labels)
        return {e.slot: r for e, r in zip(won, replays, strict=True) if r is not None}

    def _evolve(self, episodes: list[Episode], pruned: dict[int, ReplayResult], ctx: RolloutContext) -> None:
        """Append the evolved samples to the episode list the workflow builds its groups from."""
        assert self.options.evolution is not None
        evolved = evolve(episodes, pruned, ctx, self.options.evolution, self._counts)
        next_index: dict[int, int] = {}
        for episode in episodes:
            group = episode.plan.group
            next_index[group] = max(next_index.get(group, 0), episode.trajectory.rollout_index + 1)
        for item in evolved:
            trajectory = item.trajectory
            trajectory.rollout_index = next_index[item.group]
            next_index[item.group] += 1
            plan = EpisodePlan(trajectory.task, trajectory.rollout_index, item.group, meta=dict(trajectory.meta))
            final = trajectory.turns[-1].observation if trajectory.turns else ""
            episodes.append(Episode(-1, plan, trajectory, Observation(final, None), done=True))

    def _discriminate(self, trajectories: list[Trajectory]) -> None:
        """Score the discriminator on this rollout's replay labels (it has not seen them), train it on them, then
        let it label the steps that have no replay label (failures, diverged episodes); rule labels (an invalid
        turn, a no-op) stay rules. Its labels say `necessity_by: discriminator`."""
        c, discriminator = self._counts, self.discriminator
        assert discriminator is not None
        xs, ys = [], []
        for trajectory in trajectories:
            learned = [k for k, turn in enumerate(trajectory.turns)
                       if turn.info.get("necessity_by") in (BY_REPLAY, BY_DEPENDENCE)]
            if learned:
                xs.append(discriminator.features(trajectory, learned))
                ys.append(np.asarray([trajectory.turns[k].info["necessity"] == NECESSARY for k in learned]))
        if xs:
            x, y = np.vstack(xs), np.concatenate(ys)
            if discriminator.trained:
                score = discriminator.score(x, y)
                for key in ("steps", "correct", "necessary", "necessary_correct", "redundant", "redundant_correct"):
                    c[f"disc_{key}"] += getattr(score, key)
            discriminator.update(x, y)
            c["disc_trained_steps"] += len(y)
        if not discriminator.trained:
            return
        for trajectory in trajectories:
            if "necessity" in trajectory.turns[0].info:
                continue
            open_ = [k for k, turn in enumerate(trajectory.turns) if carried_out(turn)]
            predicted = discriminator.predict(discriminator.features(trajectory, open_)) if open_ else []
            for turn in trajectory.turns:
                turn.info.update(necessity=REDUNDANT, necessity_by=NOT_EXECUTED if not executed(turn) else NO_OP)
            for k, necessary in zip(open_, predicted, strict=True):
                trajectory.turns[k].info.update(necessity=NECESSARY if necessary else REDUNDANT,
                                                necessity_by=BY_DISCRIMINATOR)
            c["disc_labelled_trajectories"] += 1
            c["disc_labelled_steps"] += len(open_)
            c["disc_redundant_steps"] += int(len(open_) - np.sum(predicted))

    def metrics(self) -> dict[str, float]:
        c = self._counts
        if not c["episodes"]:
            return {}
        out = {
            "trajevolve/steps_mean": c["steps"] / c["episodes"],
            "trajevolve/success_steps_mean": ratio(c["won_steps"], c["won"]),
        }
        if self.options.label:
            out.update({
                "trajevolve/labelled_trajectories": c["labelled"],
                "trajevolve/redundant_step_fraction": ratio(c["redundant_steps"], c["labelled_steps"]),
                "trajevolve/replays": c["replays"],
                "trajevolve/replays_per_trajectory": ratio(c["replays"], c["label_attempts"]),
                "trajevolve/diverged_trajectories": c["diverged"],
            })
        if self.options.discriminate:
            out.update({
                "trajevolve/discriminator_accuracy": ratio(c["disc_correct"], c["disc_steps"]),
                "trajevolve/discriminator_necessary_accuracy": ratio(c["disc_necessary_correct"],
                                                                      c["disc_necessary"]),
                "trajevolve/discriminator_redundant_accuracy": ratio(c["disc_redundant_correct"],
                                                                      c["disc_redundant"]),
                "trajevolve/discriminator_scored_steps": c["disc_steps"],
                "trajevolve/discriminator_trained_steps": c["disc_trained_steps"],
                "trajevolve/discriminator_labelled_trajectories": c["disc_labelled_trajectories"],
                "trajevolve/discriminator_redundant_fraction": ratio(c["disc_redundant_steps"],
                                                                      c["disc_labelled_steps"]),
            })
        if self.options.label and self.options.verify_pruned:
            out["trajevolve/pruned_trajectories"] = c["pruned"]
            out["trajevolve/pruned_win_rate"] = ratio(c["pruned_wins"], c["pruned"])
        if self.options.evolution is not None:
            for key in ("evolved_pruned", "evolved_branched", "evolved_won", "prune_candidates", "branch_candidates",
                        "branch_at_start", "reasoning_regenerated", "reasoning_kept", "branch_turns"):
                out[f"trajevolve/{key}"] = c[key]
            out["trajevolve/evolved_samples"] = c["evolved_pruned"] + c["evolved_branched"]
            out["trajevolve/reasoning_regenerated_fraction"] = ratio(
                c["reasoning_regenerated"], c["reasoning_regenerated"] + c["reasoning_kept"])
        return {k: float(v) for k, v in out.items()}

