"""Counterfactual step necessity by replay: which steps of a won episode the win did not need.

Why: TrajEvolve's hindsight credit (and StraTA's audit of its self-judgment) needs a label per step that comes from
the env, not from a model. The procedure is the paper's Table 5, as ALGORITHMS.md states it: walk t = 1..T; drop
step t and the steps already labelled redundant, replay the rest from the task's initial state; still won → t is
Redundant, else Necessary. Dep(t) = the later steps the env could not carry out in that replay ("Nothing
happens."); when t is redundant, Dep(t) is labelled redundant too, without a replay of its own.

Project choices (documented in docs/trajevolve.md):
- a turn the env never stepped (an invalid response) and a turn the env stepped but did not carry out
  (`info["executable"]` False: a no-op, the state unchanged) are redundant without replay;
- with `verify` (default) one extra replay per trajectory first plays the logged actions unchanged and checks that
  it reproduces the logged observations, executable flags and the win; a trajectory whose replay differs is
  skipped (status `diverged`, no labels) and counted, never labelled from states it did not go through;
- a branched episode (`meta["prefix"]`) keeps its prefix in every replay; only its own turns are labelled.

All trajectories walk in lockstep: each round is one batched `EnvPool.replay` call with at most one request per
trajectory, so the Ray workers replay many episodes at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agentforge.envs.base import is_replayable
from agentforge.envs.replay import ReplayResult
from agentforge.errors import ConfigError
from agentforge.hosting.pool import EnvPool
from agentforge.types import Trajectory, Turn

NECESSARY = "necessary"
REDUNDANT = "redundant"

# why a step got its label
BY_REPLAY = "replay"          # its own counterfactual replay
BY_DEPENDENCE = "dependent"   # in Dep(t) of a redundant step t
NOT_EXECUTED = "not_executed"  # the env never stepped it (invalid response)
NO_OP = "no_op"               # stepped, but the env did not carry it out

LABELLED, DIVERGED, NOT_WON = "labelled", "diverged", "not_won"


@dataclass
class NecessityLabels:
    """One trajectory's labels. Indices are 0-based turn indices; `labels[k]` is NECESSARY or REDUNDANT (None when
    the trajectory was not labelled: status `diverged` or `not_won`)."""

    status: str
    labels: list[str | None]
    reasons: list[str | None]
    dependents: list[list[int]]
    replays: int = 0
    divergence: str = ""

    @property
    def redundant(self) -> list[int]:
        return [k for k, label in enumerate(self.labels) if label == REDUNDANT]

    @property
    def necessary(self) -> list[int]:
        return [k for k, label in enumerate(self.labels) if label == NECESSARY]


@dataclass
class _Walk:
    """The labelling state of one trajectory between rounds."""

    trajectory: Trajectory
    prefix: list[str]
    stepped: list[int]  # turns the env stepped, in order
    result: NecessityLabels
    cursor: int = 0
    active: bool = True
    current: int = -1
    kept: list[int] = field(default_factory=list)


def executed(turn: Turn) -> bool:
    """Whether the env stepped this turn's action (the workflow records `info["executed"]`)."""
    return bool(turn.info.get("executed")) and bool(turn.action)


def carried_out(turn: Turn) -> bool:
    """Stepped and carried out: the env's `executable` flag (absent: carried out)."""
    return executed(turn) and bool(turn.info.get("executable", True))


# What TrajEvolve does instead on an env that cannot replay (named in the error).
TRAJEVOLVE_FALLBACK = ("use the discriminator-only fallback (algorithm.counterfactual=false "
                       "algorithm.discriminator=true: the step discriminator labels steps only after it has learned "
                       "from replay labels, so from scratch it labels none; docs/trajevolve.md) or train without step "
                       "labels (algorithm=gigpo)")


def require_replayable(pool: EnvPool, fallback: str = TRAJEVOLVE_FALLBACK) -> None:
    """Refuse, by name, an env that declares it cannot replay: its counterfactual labels would be guesses."""
    if not is_replayable(pool.env_factory):
        raise ConfigError(f"env {pool.env_name!r} ({getattr(pool.env_factory, '__name__', pool.env_factory)}) "
                          "cannot replay action sequences deterministically (replayable = False), so counterfactual "
                          f"necessity labels cannot be computed on it; {fallback}")


def label_necessity(pool: EnvPool, trajectories: Sequence[Trajectory], verify: bool = True,
                    fallback: str = TRAJEVOLVE_FALLBACK) -> list[NecessityLabels]:
    """Counterfactual labels for each trajectory (see the module doc); trajectories not won get status `not_won`.

    Replays go through `pool.replay` (scratch envs; the pool's episodes are left alone). An env that cannot replay
    is a ConfigError naming it and `fallback` (what to do instead); other env errors propagate.
    """
    require_replayable(pool, fallback)
    walks: list[_Walk] = []
    results: list[NecessityLabels] = []
    for trajectory in trajectories:
        n = trajectory.length
        result = NecessityLabels(LABELLED if trajectory.won else NOT_WON, [None] * n, [None] * n,
                                 [[] for _ in range(n)])
        results.append(result)
        if trajectory.won:
            stepped = [k for k, turn in enumerate(trajectory.turns) if executed(turn)]
            walks.append(_Walk(trajectory, [str(a) for a in trajectory.meta.get("prefix", ())], stepped, result))
    if verify:
        _verify(pool, walks, fallback)
    for walk in walks:
        if walk.active:
            _label_without_replay(walk)
    while True:
        round_ = [w for w in walks if w.active and _advance(w)]
        if not round_:
            break
        requests = []
        for walk in round_:
            walk.kept = [k for k in walk.stepped if k != walk.current and walk.result.labels[k] != REDUNDANT]
            actions = [str(walk.trajectory.turns[k].action) for k in walk.kept]
            requests.append((walk.trajectory.task, walk.prefix + actions))
        for walk, replayed in zip(round_, _replay(pool, requests, fallback), strict=True):
            walk.result.replays += 1
            _apply(walk, replayed)
    return results


def pruned_actions(trajectory: Trajectory, result: NecessityLabels) -> list[str]:
    """The episode's actions without its redundant steps (the branch prefix kept): the prune strategy's sequence."""
    prefix = [str(a) for a in trajectory.meta.get("prefix", ())]
    return prefix + [str(turn.action) for k, turn in enumerate(trajectory.turns)
                     if executed(turn) and result.labels[k] == NECESSARY]


def verify_pruned(pool: EnvPool, trajectories: Sequence[Trajectory], results: Sequence[NecessityLabels],
                  fallback: str = TRAJEVOLVE_FALLBACK) -> list[bool | None]:
    """Replay each labelled trajectory's necessary steps alone (one batched call): True when the pruned sequence
    still wins, False when not, None where there is nothing to prune or no labels. Labels imply a win (every
    redundant step was dropped in a winning replay, or was a no-op there), so False means the env broke the no-op
    assumption; the replay is counted in the result's `replays`."""
    return [None if r is None else r.won for r in replay_pruned(pool, trajectories, results, fallback)]


def replay_pruned(pool: EnvPool, trajectories: Sequence[Trajectory], results: Sequence[NecessityLabels],
                  fallback: str = TRAJEVOLVE_FALLBACK) -> list[ReplayResult | None]:
    """`verify_pruned`'s replays themselves (the states the pruned sequence goes through: what an evolved
    trajectory is built from); None where there is nothing to prune or no labels."""
    out: list[ReplayResult | None] = [None] * len(results)
    todo = [i for i, r in enumerate(results) if r.status == LABELLED and r.redundant]
    if not todo:
        return out
    requests = [(trajectories[i].task, pruned_actions(trajectories[i], results[i])) for i in todo]
    for i, replayed in zip(todo, _replay(pool, requests, fallback), strict=True):
        results[i].replays += 1
        out[i] = replayed
    return out


def _replay(pool: EnvPool, requests: list, fallback: str) -> list[ReplayResult]:
    try:
        return pool.replay(requests)
    except ConfigError as error:  # an env instance that declared replayable = False
        raise ConfigError(f"{error} Counterfactual necessity labels need replay: {fallback}") from error


def _label_without_replay(walk: _Walk) -> None:
    result = walk.result
    for k, turn in enumerate(walk.trajectory.turns):
        if not executed(turn):
            result.labels[k], result.reasons[k] = REDUNDANT, NOT_EXECUTED
        elif not carried_out(turn):
            result.labels[k], result.reasons[k] = REDUNDANT, NO_OP


def _advance(walk: _Walk) -> bool:
    """Move to the next unlabelled stepped turn; False when the walk is over."""
    while walk.cursor < len(walk.stepped):
        k = walk.stepped[walk.cursor]
        walk.cursor += 1
        if walk.result.labels[k] is None:
            walk.current = k
            return True
    walk.active = False
    return False


def _apply(walk: _Walk, replayed: ReplayResult) -> None:
    """Label the current step from its replay and record Dep(t)."""
    t, result, offset = walk.current, walk.result, len(walk.prefix)
    dependents = sorted(walk.kept[j - offset] for j in replayed.inexecutable_steps
                        if j >= offset and walk.kept[j - offset] > t)
    result.dependents[t] = dependents
    if replayed.won:
        result.labels[t], result.reasons[t] = REDUNDANT, BY_REPLAY
        for u in dependents:
            if result.labels[u] is None:
                result.labels[u], result.reasons[u] = REDUNDANT, BY_DEPENDENCE
    else:
        result.labels[t], result.reasons[t] = NECESSARY, BY_REPLAY


def _verify(pool: EnvPool, walks: list[_Walk], fallback: str) -> None:
    """One replay per trajectory of its logged actions: a trajectory the env does not reproduce is skipped."""
    if not walks:
        return
    requests = [(w.trajectory.task, w.prefix + [str(w.trajectory.turns[k].action) for k in w.stepped]) for w in walks]
    for walk, replayed in zip(walks, _replay(pool, requests, fallback), strict=True):
        walk.result.replays += 1
        problem = divergence(walk.trajectory, walk.prefix, walk.stepped, replayed)
        if problem:
            walk.active = False
            walk.result.status, walk.result.divergence = DIVERGED, problem


def divergence(trajectory: Trajectory, prefix: list[str], stepped: list[int], replayed: ReplayResult) -> str:
    """What differs between a logged episode and the replay of its actions ('' when nothing does)."""
    if replayed.unplayed or len(replayed.steps) != len(prefix) + len(stepped):
        return f"the replay ended after {len(replayed.steps)} of {len(prefix) + len(stepped)} actions"
    seen = [replayed.initial_observation, *(step.observation for step in replayed.steps)]
    position = len(prefix)
    for k, turn in enumerate(trajectory.turns):
        shown = seen[position]
        if shown.text != turn.observation or shown.anchor != turn.anchor:
            return f"turn {k + 1}: the replay shows another observation than the one logged"
        if executed(turn):
            step = replayed.steps[position]
            if "executable" in turn.info and bool(turn.info["executable"]) != step.executable:
                return f"turn {k + 1}: executable {turn.info['executable']} logged, {step.executable} in the replay"
            position += 1
    if not replayed.won:
        return "the replay of the logged actions does not win"
    return ""


__all__ = ["BY_DEPENDENCE", "BY_REPLAY", "DIVERGED", "LABELLED", "NECESSARY", "NOT_EXECUTED", "NOT_WON", "NO_OP",
           "REDUNDANT", "NecessityLabels", "carried_out", "divergence", "executed", "TRAJEVOLVE_FALLBACK",
           "label_necessity", "pruned_actions", "require_replayable", "verify_pruned"]
