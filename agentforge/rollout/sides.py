"""Self-play: one game played by the policy on every side becomes one trajectory per side, in a group per side.

An env that hands the policy every side's turns (TextArena with `opponent=self`) says so in its observations'
`info`: `sides` (how many sides the policy plays) and `player` (whose move it is; the rollout copies it into the
turn taken there). When the game ends, the final step's info holds `rewards` ({side: reward}) and `winners`; its
reward is the mover's. After the episodes, `split_sides` gives each side its own turns (the very `Turn` objects,
so the token ids and log-probs the engine sampled), its own final reward (added to its last turn when another side
made the final move) and its own win, and puts the G trajectories of each side in a group of their own.

Why a group per side: group-relative advantages then normalise each role against its own baseline (SPIRAL's
role-conditioned advantage estimation, Liu et al. 2025), so the first mover's usual edge is not absorbed into
the second's baseline. The algorithms see ordinary groups and never learn that the library or self-play exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentforge.envs.base import REWARDS, SIDE, SIDES, WINNERS
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.types import Group, Observation, Span, Trajectory, Turn

if TYPE_CHECKING:
    from agentforge.agent.render import AgentConfig

SUPPORTED = ("only the turns of played games can be given to a side: train self-play with grpo or gigpo (t2po's "
             "discarded turns go with their turn's side)")


def played_sides(observation: Observation) -> int:
    """How many sides of the game the policy plays (1 unless the env says more)."""
    return int(observation.info.get(SIDES, 1) or 1)


def check_history(config: AgentConfig, observations: Sequence[Observation]) -> None:
    """Refuse a history that would show one side the other's turns as its own (it is per episode, not per side)."""
    if not any(played_sides(o) > 1 for o in observations):
        return
    if config.conversation or config.history_length > 0:
        raise ConfigError("the env plays the policy on every side (self-play), but agent.history="
                          f"{config.history} agent.history_length={config.history_length} would show one side the "
                          "other side's moves as its own; set agent.history=window agent.history_length=0 (the "
                          "env's observation already holds the game log)")


def split_sides(groups: Sequence[Group]) -> list[Group]:
    """Each self-play group becomes one group per side (in side order); other groups pass unchanged."""
    out: list[Group] = []
    for group in groups:
        count = max((int(t.info.get(SIDES, 1) or 1) for traj in group.trajectories for t in traj.turns), default=1)
        if count <= 1:
            out.append(group)
            continue
        per_side = [side_trajectories(trajectory, count) for trajectory in group.trajectories]
        out.extend(Group(task=group.task, trajectories=[sides[s] for sides in per_side]) for s in range(count))
    return out


def side_trajectories(trajectory: Trajectory, count: int) -> list[Trajectory]:
    """One trajectory per side: its turns in order, its final reward and win; `meta["player"]` names the side."""
    if trajectory.meta.get("evolved"):
        raise AgentforgeError(f"self-play splits each game into one trajectory per side, but {SUPPORTED}; a "
                              f"{trajectory.meta['evolved']!r} trajectory of {trajectory.task.describe()} was built "
                              "from a game rather than played (TrajEvolve)")
    turns: list[list[Turn]] = [[] for _ in range(count)]
    where: dict[int, tuple[int, int]] = {}  # game turn index -> (side, index in the side's turns)
    for index, turn in enumerate(trajectory.turns):
        side = _side_of(turn, count, trajectory)
        where[index] = (side, len(turns[side]))
        turns[side].append(turn)
    final = next((t.info for t in reversed(trajectory.turns) if REWARDS in t.info), None)
    spans = _side_spans(trajectory, where, count)
    out = []
    for side in range(count):
        own, won = turns[side], False
        if final is not None:
            own, won = _with_final_reward(own, side, final), side in set(final.get(WINNERS) or [])
        meta = {**trajectory.meta, SIDE: side, "game_turns": len(trajectory.turns)}
        out.append(Trajectory(task=trajectory.task, rollout_index=trajectory.rollout_index, turns=own, won=won,
                              meta=meta, spans=spans[side]))
    return out


def _side_of(turn: Turn, count: int, trajectory: Trajectory) -> int:
    side = turn.info.get(SIDE)
    if not isinstance(side, int) or not 0 <= side < count:
        raise AgentforgeError(f"a self-play turn of {trajectory.task.describe()} says no valid side (info[{SIDE!r}]="
                              f"{side!r}, {count} sides): the env must name the side to move in every observation")
    return side


def _with_final_reward(turns: list[Turn], side: int, final: dict[str, Any]) -> list[Turn]:
    """The side's turns with its end-of-game reward on its last turn, unless that turn made the final move (the env
    paid it there already)."""
    rewards = {int(k): float(v) for k, v in dict(final[REWARDS]).items()}
    if not turns or turns[-1].info is final or side not in rewards:
        return turns
    last = turns[-1]
    reward = rewards[side]
    info = {**last.info, "final_reward": reward}
    return [*turns[:-1], replace(last, reward=last.reward + reward, env_reward=last.env_reward + reward, done=True,
                                 info=info)]


def _side_spans(trajectory: Trajectory, where: dict[int, tuple[int, int]], count: int) -> list[list[Span]]:
    """Generations outside the turns go with the side of the turn they belong to (re-indexed); one that belongs to
    no turn (an episode-level strategy) has no side and is refused."""
    spans: list[list[Span]] = [[] for _ in range(count)]
    for span in trajectory.spans:
        if span.turn_index is None or span.turn_index not in where:
            raise AgentforgeError(f"self-play splits each game into one trajectory per side, but {SUPPORTED}; a "
                                  f"{span.kind!r} span of {trajectory.task.describe()} belongs to no turn (an "
                                  "episode-level generation such as StraTA's strategy)")
        side, index = where[span.turn_index]
        spans[side].append(replace(span, turn_index=index))
    return spans
