"""What every library adapter shares: importing the library (or saying how to install it), refusing bad ids and
options with the valid ones listed, and keeping the process-global RNGs that most text-env libraries draw from
private to each env instance.

Why the RNG isolation: GEM, TextArena and reasoning-gym's games seed and draw from the module-level `random` /
`numpy.random` generators. One env worker hosts many envs and steps them in any order, so without isolation an
episode's dice would depend on what the other slots did, and a worker restarted after a crash would replay a
different game. Each adapter env owns its generators' states and swaps them in around every library call.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import random
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from agentforge.errors import ConfigError

INVALID = "invalid_action"  # the StepResult.info key naming why the library refused an action (absent when valid)
_RNG_LOCK = threading.RLock()  # env_pool.step_threads > 1 steps envs of one worker side by side


def install_hint(extra: str) -> str:
    return f"`make setup` installs it, or `pip install -e '.[{extra}]'` (see docs/environments.md)"


def import_library(module: str, extra: str, env: str) -> Any:
    """The library's module, or a ConfigError saying which extra installs it."""
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"env {env!r} needs the {module!r} package, which is not installed; {install_hint(extra)}")
    return importlib.import_module(module)


def unknown_id(env: str, key: str, value: Any, valid: Iterable[str], limit: int = 60) -> ConfigError:
    """A bad `env.<key>`: the nearest valid values first, then (up to `limit`) every valid one."""
    names = sorted(set(valid))
    near = difflib.get_close_matches(str(value), names, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(near)}?" if near else ""
    shown = ", ".join(names[:limit]) + (f", … ({len(names)} in all)" if len(names) > limit else "")
    return ConfigError(f"env {env!r}: unknown {key} {value!r}.{hint} Valid {key} values: {shown}")


def bad_options(env: str, what: str, given: Iterable[str], valid: Iterable[str], error: Exception | None = None
                ) -> ConfigError:
    """Options the library's constructor does not take, with the ones it does."""
    valid_list = sorted(set(valid))
    cause = f" ({error})" if error is not None else ""
    return ConfigError(f"env {env!r}: {what} does not take option(s) {', '.join(sorted(given))}{cause}; "
                       f"valid options: {', '.join(valid_list) or '(none)'}")


def check_action_format(env: str, action_format: str) -> None:
    """An `action_format` is a Python format string with one `{action}` field (braces doubled)."""
    try:
        probe = action_format.format(action="\0")
    except (KeyError, IndexError, ValueError) as error:
        raise ConfigError(f"env {env!r}: action_format {action_format!r} is not a format string with one {{action}} "
                          f"field ({error}); write braces as {{{{ }}}}, e.g. '\\boxed{{{{{{action}}}}}}'") from None
    if "\0" not in probe:
        raise ConfigError(f"env {env!r}: action_format {action_format!r} has no {{action}} field")


class PrivateRng:
    """The `random` and `numpy.random` states of one env instance, swapped in around the library's calls."""

    def __init__(self) -> None:
        self._py: Any = None
        self._np: Any = None

    def seed(self, seed: int) -> None:
        """Fresh states for an episode: the same task seed gives the same draws in every process."""
        with _RNG_LOCK:
            saved = random.getstate(), np.random.get_state()
            random.seed(seed)
            np.random.seed(seed % 2**32)
            self._py, self._np = random.getstate(), np.random.get_state()
            random.setstate(saved[0])
            np.random.set_state(saved[1])

    @contextmanager
    def active(self) -> Iterator[None]:
        """Run a block with this env's generators, then put the caller's back (this env's advanced ones kept)."""
        with _RNG_LOCK:
            saved = random.getstate(), np.random.get_state()
            if self._py is not None:
                random.setstate(self._py)
                np.random.set_state(self._np)
            try:
                yield
            finally:
                self._py, self._np = random.getstate(), np.random.get_state()
                random.setstate(saved[0])
                np.random.set_state(saved[1])


def plain_kwargs(kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """An options mapping (maybe an OmegaConf node) as plain Python values for the library's constructor."""
    if not kwargs:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(kwargs, DictConfig):
            return dict(OmegaConf.to_container(kwargs, resolve=True))  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - omegaconf is a core dependency
        pass
    return {str(k): v for k, v in dict(kwargs).items()}


SKIP = object()  # `plain_data`'s answer for a value that is not data (a dataset object, a method)


def plain_data(value: Any) -> Any:
    """A library's state as JSON-able data, for task keys: numpy arrays and scalars as lists and numbers, sets
    sorted, dict keys as text; `SKIP` for anything else (its repr may hold a memory address, which changes per run)."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    if isinstance(value, dict):
        items = {str(plain_data(k)): plain_data(v) for k, v in value.items()}
        return SKIP if any(v is SKIP for v in items.values()) else items
    if isinstance(value, list | tuple | set | frozenset):
        listed = [plain_data(v) for v in value]
        if any(v is SKIP for v in listed):
            return SKIP
        return sorted(listed, key=repr) if isinstance(value, set | frozenset) else listed
    return SKIP


def plain_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields that are data (`plain_data`), by name; the others left out."""
    out = {name: plain_data(value) for name, value in sorted(fields.items())}
    return {name: value for name, value in out.items() if value is not SKIP}
