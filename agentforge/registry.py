"""Name -> object registries: algorithms, envs, engines and descriptors are plugins found by name."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

from agentforge.errors import unknown_name

T = TypeVar("T")


class Registry(Generic[T]):
    """A named registry; `get` also accepts a dotted path `pkg.mod:attr` so users extend it without a fork."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            return obj

        return add

    def names(self) -> list[str]:
        return sorted(self._items)

    def builtin_names(self) -> list[str]:
        """The names agentforge itself registers (not plugins or tests that registered theirs in this process)."""
        return sorted(n for n, obj in self._items.items()
                      if str(getattr(obj, "__module__", "")).split(".")[0] == "agentforge")

    def get(self, name: str) -> T:
        if name in self._items:
            return self._items[name]
        if ":" in name:
            module, _, attr = name.partition(":")
            return getattr(importlib.import_module(module), attr)
        raise unknown_name(self.kind, name, self.names())

    def __contains__(self, name: str) -> bool:
        return name in self._items
