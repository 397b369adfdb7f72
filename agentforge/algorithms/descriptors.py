"""Trajectory descriptors: what TJPO makes diverse, as a vector on the probability simplex per finished trajectory.

A descriptor is a function `fn(trajectory) -> counts` (any non-negative 1-D numbers); agentforge checks the result
and ℓ1-normalises it, so a user descriptor only has to count. Built-ins are registered by name; a user's own is
named by dotted path in the config (`algorithm.descriptor=mypkg.descriptors:tool_calls`) and needs no registration.
An all-zero count vector (e.g. no move at all) stays all zero: there is nothing to normalise, and it is the
natural "did nothing" point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from agentforge.errors import AgentforgeError, ConfigError
from agentforge.registry import Registry
from agentforge.types import Trajectory

DescriptorFn = Callable[[Trajectory], Any]


@dataclass(frozen=True)
class Descriptor:
    """A named descriptor function; calling it validates and ℓ1-normalises what the function returns.

    `env` is the env family the built-in applies to (`alfworld`, `sokoban`), used to pick the cross-metric set an
    evaluation reports; None for user descriptors, which apply wherever they are named.
    """

    name: str
    fn: DescriptorFn
    env: str | None = None

    def __call__(self, trajectory: Trajectory) -> np.ndarray:
        try:
            raw = self.fn(trajectory)
        except AgentforgeError:
            raise
        except Exception as error:  # name the descriptor: a user function's stack trace alone does not
            raise AgentforgeError(
                f"descriptor {self.name!r} failed on {trajectory.task.describe()} "
                f"(rollout {trajectory.rollout_index}): {type(error).__name__}: {error}"
            ) from error
        return self.validate(raw)

    def validate(self, raw: Any) -> np.ndarray:
        """A finite, non-negative 1-D vector with at least one entry, ℓ1-normalised (all-zero stays zero)."""
        try:
            vector = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise AgentforgeError(
                f"descriptor {self.name!r} returned {type(raw).__name__}, which is not a vector of numbers ({error}); "
                "return a 1-D list or numpy array of non-negative counts"
            ) from error
        if vector.ndim != 1 or vector.size == 0:
            raise AgentforgeError(
                f"descriptor {self.name!r} returned an array of shape {vector.shape}; it must return a non-empty 1-D "
                "vector (flatten matrices, e.g. counts.ravel())"
            )
        if not np.all(np.isfinite(vector)):
            raise AgentforgeError(f"descriptor {self.name!r} returned a non-finite entry (NaN or inf): {vector}")
        if np.any(vector < 0):
            raise AgentforgeError(
                f"descriptor {self.name!r} returned a negative entry ({vector.min():g}); descriptors are counts or "
                "weights, which agentforge ℓ1-normalises onto the probability simplex"
            )
        total = vector.sum()
        return vector / total if total > 0 else vector


DESCRIPTORS: Registry[Descriptor] = Registry("descriptor")


def register_descriptor(name: str, env: str | None = None) -> Callable[[DescriptorFn], DescriptorFn]:
    """Register a built-in (or a plugin's) descriptor function under `name`."""

    def add(fn: DescriptorFn) -> DescriptorFn:
        DESCRIPTORS.register(name)(Descriptor(name, fn, env))
        return fn

    return add


def get_descriptor(name: str) -> Descriptor:
    """A registered descriptor by name, or a user function by dotted path `pkg.mod:fn`."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a descriptor is named by a string; got {name!r} (valid: {', '.join(DESCRIPTORS.names())})")
    try:
        found: Any = DESCRIPTORS.get(name)
    except (ImportError, AttributeError) as error:
        raise ConfigError(
            f"descriptor {name!r} could not be imported ({error}); give `pkg.module:function` importable from the "
            f"run's Python path, or one of the registered descriptors: {', '.join(DESCRIPTORS.names())}"
        ) from error
    if isinstance(found, Descriptor):
        return found
    if not callable(found):
        raise ConfigError(f"descriptor {name!r} resolves to {found!r}, which is not callable; point it at a function "
                          "taking a Trajectory and returning counts")
    return Descriptor(name, found)


def descriptors_for_env(env_name: str) -> list[str]:
    """The built-in descriptors that apply to an env (`alfworld_intervention` counts as alfworld)."""
    return [name for name in DESCRIPTORS.names() if (d := DESCRIPTORS.get(name)).env and env_name.startswith(d.env)]


def describe_group(descriptor: Descriptor, trajectories: Sequence[Trajectory]) -> np.ndarray:
    """The (n, d) descriptor matrix of a group; every trajectory of a group must give the same dimension."""
    if not trajectories:
        return np.zeros((0, 0))
    vectors = [descriptor(t) for t in trajectories]
    sizes = {v.size for v in vectors}
    if len(sizes) > 1:
        raise AgentforgeError(
            f"descriptor {descriptor.name!r} returned vectors of different lengths {sorted(sizes)} within one group "
            f"({trajectories[0].task.describe()}); a descriptor must give one fixed dimension per task"
        )
    return np.stack(vectors)


# ---- ALFWorld ------------------------------------------------------------------------------------------------------
def _acted_turns(trajectory: Trajectory) -> list[Any]:
    """Turns whose action was parsed and sent to the env (invalid-format turns carry no action)."""
    return [turn for turn in trajectory.turns if turn.action is not None]


@register_descriptor("action_type", env="alfworld")
def alfworld_action_type(trajectory: Trajectory) -> np.ndarray:
    """Counts of ALFWorld action verbs (go to, open, ..., look, inventory, other) over the actions taken."""
    from agentforge.envs.alfworld.env import ACTION_TYPES, action_type

    index = {kind: i for i, kind in enumerate(ACTION_TYPES)}
    counts = np.zeros(len(ACTION_TYPES))
    for turn in _acted_turns(trajectory):
        counts[index[turn.info.get("action_type") or action_type(turn.action)]] += 1
    return counts


@cache
def alfworld_location_categories() -> tuple[str, ...]:
    """Receptacle categories as the engine names them (`countertop`, `sinkbasin`, ...), then `other`."""
    from agentforge.envs.alfworld.vocabulary import RTYPES

    return (*sorted({rtype.lower() for rtype in RTYPES}), "other")


@register_descriptor("location", env="alfworld")
def alfworld_location(trajectory: Trajectory) -> np.ndarray:
    """Counts of receptacle categories reached by an accepted `go to X` (`countertop 2` counts as countertop)."""
    categories = alfworld_location_categories()
    index = {name: i for i, name in enumerate(categories)}
    counts = np.zeros(len(categories))
    for turn in trajectory.turns:
        category = turn.info.get("location_category")
        if category:
            counts[index.get(category, len(categories) - 1)] += 1
    return counts


# ---- Sokoban -------------------------------------------------------------------------------------------------------
@register_descriptor("direction_transition", env="sokoban")
def sokoban_direction_transition(trajectory: Trajectory) -> np.ndarray:
    """4×4 counts of consecutive moves (previous → next) in the emitted action stream, flattened row-major."""
    from agentforge.envs.sokoban import ACTIONS

    index = {name: i for i, name in enumerate(ACTIONS)}
    moves = [index[a] for a in (t.action.strip().lower() for t in _acted_turns(trajectory)) if a in index]
    counts = np.zeros((len(ACTIONS), len(ACTIONS)))
    for previous, following in zip(moves, moves[1:], strict=False):
        counts[previous, following] += 1
    return counts.ravel()


@register_descriptor("spatial_coverage", env="sokoban")
def sokoban_spatial_coverage(trajectory: Trajectory) -> np.ndarray:
    """Counts of the room cells the player stood on (the start cell and after every step), flattened row-major."""
    from agentforge.envs.sokoban import parse_grid

    if not trajectory.turns:
        raise AgentforgeError("descriptor 'spatial_coverage' needs at least one turn (the first anchor is the room)")
    start = parse_grid(str(trajectory.turns[0].anchor))
    height, width = start.room.height, start.room.width
    counts = np.zeros((height, width))
    counts[start.player] += 1
    for turn in trajectory.turns:
        position = turn.info.get("player_pos")
        if position is not None:
            row, col = (int(v) for v in position)
            counts[row, col] += 1
    return counts.ravel()


# ---- Gymnasium (the gym adapter) -------------------------------------------------------------------------------------
GYM_STATE_BUCKETS = 64  # discrete states fold into this many cells (FrozenLake 4x4: 16, 8x8: 64), fixed per run


@register_descriptor("state_coverage", env="gym")
def gym_state_coverage(trajectory: Trajectory) -> np.ndarray:
    """Counts of the discrete states visited (each turn's starting state and the last one reached), for envs whose
    observation is a state index (FrozenLake, CliffWalking, Taxi); other observations hash into the same cells."""
    counts = np.zeros(GYM_STATE_BUCKETS)
    states = [turn.anchor for turn in trajectory.turns]
    if trajectory.turns and "state" in trajectory.turns[-1].info:
        states.append(trajectory.turns[-1].info["state"])
    for state in states:
        text = str(state)
        index = int(text) if text.isdigit() else sum(text.encode())
        counts[index % GYM_STATE_BUCKETS] += 1
    return counts


# ---- external agents (env=agent, the gateway) ---------------------------------------------------------------------
TOOL_BUCKETS = 8  # tool names hash into this many buckets (a fixed dimension, whatever tools an agent has)


@register_descriptor("tool_calls", env="agent")
def agent_tool_calls(trajectory: Trajectory) -> np.ndarray:
    """Which tools an external agent's model called and in what order: counts of each tool (hashed into
    `TOOL_BUCKETS`) and of consecutive tool pairs (previous → next, hashed likewise), then the calls that named no
    tool. Two episodes that searched twice and answered describe alike; one that only answered differs."""
    import zlib

    def bucket(name: str) -> int:
        return zlib.crc32(name.encode()) % TOOL_BUCKETS

    unigrams, pairs = np.zeros(TOOL_BUCKETS), np.zeros(TOOL_BUCKETS)
    plain = 0.0
    names: list[str] = []
    for turn in trajectory.turns:
        called = [c["function"]["name"] for c in turn.info.get("tool_calls") or []]
        plain += 0.0 if called else 1.0
        names.extend(called)
    for name in names:
        unigrams[bucket(name)] += 1
    for previous, following in zip(names, names[1:], strict=False):
        pairs[bucket(f"{previous}->{following}")] += 1
    return np.concatenate([unigrams, pairs, [plain]])
