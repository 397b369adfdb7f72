"""Trajectory descriptors: what TJPO makes diverse, as a vector on the probability simplex per finished trajectory.

A descriptor is a function `fn(trajectory) -> counts` (any non-negative 1-D numbers); agentforge checks the result
and ℓ1-normalises it, so a user descriptor only has to count. An env owns its descriptors: its class names them
(`descriptors = {"direction_transition": "agentforge.envs.sokoban_descriptors:sokoban_direction_transition"}`), and
they are found by name through it; a plugin may register one here (`register_descriptor`); a user's own is named by
dotted path in the config (`algorithm.descriptor=mypkg.descriptors:tool_calls`) and needs no registration.
An all-zero count vector (e.g. no move at all) stays all zero: there is nothing to normalise, and it is the
natural "did nothing" point.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from agentforge.errors import AgentforgeError, ConfigError, unknown_name
from agentforge.registry import Registry
from agentforge.types import Trajectory

DescriptorFn = Callable[[Trajectory], Any]


@dataclass(frozen=True)
class Descriptor:
    """A named descriptor function; calling it validates and ℓ1-normalises what the function returns.

    `env` is the env that declares it (`alfworld`, `sokoban`) or a registered one's tag, used to pick the cross-metric
    set an evaluation reports; None for user descriptors, which apply wherever they are named.
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


def known_names() -> list[str]:
    """The descriptors a config may name: those the envs declare and those registered here (plugins)."""
    from agentforge.envs.base import declared_descriptors

    return sorted({*declared_descriptors(), *DESCRIPTORS.names()})


def get_descriptor(name: str) -> Descriptor:
    """A descriptor by name (an env's own, declared on its class, or one registered here), or a user function by
    dotted path `pkg.mod:fn`."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a descriptor is named by a string; got {name!r} (valid: {', '.join(known_names())})")
    from agentforge.envs.base import declared_descriptors

    declared = declared_descriptors()
    env = None
    if name in declared and name not in DESCRIPTORS:
        env, path = declared[name]
        return Descriptor(name, _imported(path), env)
    try:
        found: Any = DESCRIPTORS.get(name)
    except (ImportError, AttributeError) as error:
        raise ConfigError(
            f"descriptor {name!r} could not be imported ({error}); give `pkg.module:function` importable from the "
            f"run's Python path, or one of the descriptors: {', '.join(known_names())}"
        ) from error
    except AgentforgeError as error:  # not an env's, not registered, not a dotted path
        raise unknown_name("descriptor", name, known_names()) from error
    if isinstance(found, Descriptor):
        return found
    if not callable(found):
        raise ConfigError(f"descriptor {name!r} resolves to {found!r}, which is not callable; point it at a function "
                          "taking a Trajectory and returning counts")
    return Descriptor(name, found, env)


@cache
def _imported(path: str) -> DescriptorFn:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def descriptors_for_env(env_name: str) -> list[str]:
    """The descriptors that apply to an env: those its class declares, and registered ones tagged with it (a
    plugin's; `alfworld_intervention` counts as alfworld)."""
    import agentforge.envs  # noqa: F401  (registers the built-in envs)
    from agentforge.envs.base import ENVS

    own = list(getattr(ENVS.get(env_name), "descriptors", None) or {}) if env_name in ENVS else []
    tagged = [n for n in DESCRIPTORS.names() if (d := DESCRIPTORS.get(n)).env and env_name.startswith(d.env)]
    return sorted({*own, *tagged})


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
