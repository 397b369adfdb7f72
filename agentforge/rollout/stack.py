"""What every command plays with, held and closed as one (built by `commands.builders.build_rollout_stack`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentforge.engines.base import RolloutEngine
from agentforge.hosting.pool import EnvPool
from agentforge.reliability.closing import close_all
from agentforge.rollout.workflow import RolloutContext


@dataclass
class RolloutStack:
    """What every command plays with: the engine, the env pool, the rollout context and the algorithm's workflow for
    each purpose. `close()` closes all of it, each part once, workflows first (a gateway's HTTP server and batcher,
    for env=agent), then the pool, then the engine; a part that fails to close does not keep the others open, and
    never hides an error already on its way out (reliability/closing.py)."""

    engine: RolloutEngine
    pool: EnvPool
    ctx: RolloutContext
    algorithm: Any
    workflows: dict[str, Any] = field(default_factory=dict)
    closed: bool = False

    def workflow(self, purpose: str) -> Any:
        return self.workflows[purpose]

    def close(self, during_error: bool | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        closers = [w.close for w in self.workflows.values() if hasattr(w, "close")]
        close_all([*closers, self.pool.close, self.engine.close], during_error)

    def __enter__(self) -> RolloutStack:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(during_error=exc_type is not None)
