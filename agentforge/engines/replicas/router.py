"""Which replica serves a request: sticky per episode (its next turn's prompt extends the last one, so the replica
that served it holds the prefix in its KV cache), least-loaded for a new episode or when stickiness would overload
one replica."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence

STICKY_KEYS = 65_536  # remembered episodes (oldest forgotten first)


class Router:
    """`route(keys)` -> one replica index per request. `slack`: how many requests above an even share a replica
    may take in one call before a sticky episode moves to the least-loaded replica."""

    def __init__(self, replicas: int, slack: int = 1) -> None:
        self.replicas = replicas
        self.slack = slack
        self.in_flight = [0] * replicas  # requests sent and not yet returned, over concurrent calls
        self._sticky: OrderedDict[Hashable, int] = OrderedDict()
        self._lock = threading.Lock()
        self.moved = 0  # sticky episodes moved to balance the load
        self.assigned = [0] * replicas  # episodes given a lane by `assign` since the last `forget`

    def route(self, keys: Sequence[Hashable | None]) -> list[int]:
        with self._lock:
            cap = math.ceil((len(keys) + sum(self.in_flight)) / self.replicas) + self.slack
            load = list(self.in_flight)
            out = []
            for key in keys:
                chosen = self._sticky.get(key) if key is not None else None
                if chosen is not None and (chosen >= self.replicas or load[chosen] >= cap):
                    self.moved += 1
                    chosen = None
                if chosen is None:
                    chosen = min(range(self.replicas), key=lambda r: (load[r], r))
                load[chosen] += 1
                if key is not None:
                    self._sticky[key] = chosen
                    self._sticky.move_to_end(key)
                    if len(self._sticky) > STICKY_KEYS:
                        self._sticky.popitem(last=False)
                out.append(chosen)
            for r in out:
                self.in_flight[r] += 1
            return out

    def assign(self, key: Hashable) -> int:
        """The replica of an episode under per-episode scheduling: the one it had, else the one with the fewest
        episodes (every turn of an episode then reuses its replica's cached prefix)."""
        with self._lock:
            chosen = self._sticky.get(key)
            if chosen is None or chosen >= self.replicas:
                chosen = min(range(self.replicas), key=lambda r: (self.assigned[r], r))
                self.assigned[chosen] += 1
                self._sticky[key] = chosen
                if len(self._sticky) > STICKY_KEYS:
                    self._sticky.popitem(last=False)
            self._sticky.move_to_end(key)
            return chosen

    def done(self, replica: int, count: int) -> None:
        with self._lock:
            self.in_flight[replica] = max(0, self.in_flight[replica] - count)

    def forget(self) -> None:
        """New weights: cached prefixes are gone on every replica, so stickiness no longer pays."""
        with self._lock:
            self._sticky.clear()
            self.assigned = [0] * self.replicas
