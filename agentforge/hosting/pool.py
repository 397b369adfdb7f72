"""Env pools: many episodes stepped in batches, in-process (`LocalEnvPool`) or in Ray actors (`RayEnvPool`).

A pool hosts one env per slot; slot i plays `tasks[i]` of the last `reset`. The Ray pool keeps a log of every
slot's task and actions, so when a worker process dies it starts a replacement, replays the worker's episodes
(envs are deterministic given task and actions) and retries the call: results equal an uninterrupted run.

Replay and branching (`agentforge.envs.replay`): `replay(requests)` replays (task, actions) pairs on scratch envs
(one per worker, kept between calls) without touching the slots' episodes, spread over the workers in one call
each; `reset(tasks, prefixes)` starts slot i on tasks[i] and replays prefixes[i] on it, so sampling continues
from there (`reset_with_prefixes` also returns each prefix's per-step results). Prefix actions enter the slot's
action log like stepped ones, so crash recovery reproduces a branched episode too.

Faults (docs/reliability.md), each counted in `fault_counts()` and logged per iteration as `env/*`:
- a worker process that dies (a crash, `ray.kill`, Ray's memory monitor) is replaced and its episodes replayed;
- an env call that runs longer than `step_timeout_s` (a hung ALFWorld engine, a stopped ScienceWorld JVM, a user
  env that never returns) counts as a dead worker: the actor is killed, replaced and its episodes replayed. The
  driver notices without polling: it waits `step_timeout_s` for a batch, then asks the actor (on a second thread,
  so a hung env does not block the answer) which env call is running and for how long;
- an env that raises in `step` is rebuilt (fresh env, episode replayed) and the step retried `step_retries` times;
  if it raises every time, the error is re-raised with a note naming the env, the slot, the task and the action.

Where: the interface, the slots' logs and the in-process pool in `hosting/pool_base.py`, the Ray pool and its recovery
in `hosting/ray_pool.py`; this module is their face (import the pools from here) and `make_pool`.
"""

from __future__ import annotations

from typing import Any

from agentforge.cluster.ray_runtime import ensure_ray  # re-exported: callers import it from here
from agentforge.errors import ConfigError
from agentforge.hosting.host import EnvHost
from agentforge.hosting.pool_base import (
    DEFAULT_STEP_RETRIES,
    DEFAULT_STEP_TIMEOUT_S,
    FAULT_COUNTS,
    POOL_KINDS,
    POOL_OPTIONS,
    RAY_ONLY_OPTIONS,
    EnvPool,
    LocalEnvPool,
    resolve_env,
)
from agentforge.hosting.ray_pool import EnvCallTimeout, RayEnvPool

__all__ = ["DEFAULT_STEP_RETRIES", "DEFAULT_STEP_TIMEOUT_S", "FAULT_COUNTS", "EnvCallTimeout", "EnvHost", "EnvPool",
           "LocalEnvPool", "RayEnvPool", "ensure_ray", "make_pool", "resolve_env"]


def make_pool(kind: str, env_name: str, env_options: dict[str, Any] | None = None, **kwargs: Any) -> EnvPool:
    """Build an env pool: `ray` (actors, fault recovery) or `local` (in-process, for debugging)."""
    if kind == "ray":
        return RayEnvPool(env_name, env_options, **kwargs)
    if kind == "local":
        unknown = sorted(set(kwargs) - RAY_ONLY_OPTIONS - POOL_OPTIONS)
        if unknown:
            raise ConfigError(f"unknown env pool options {unknown}; valid: "
                              f"{', '.join(sorted(RAY_ONLY_OPTIONS | POOL_OPTIONS))}")
        # Ray-only options (workers, restarts, timeouts) do not apply in-process
        return LocalEnvPool(env_name, env_options, **{k: v for k, v in kwargs.items() if k in POOL_OPTIONS})
    raise ConfigError(f"unknown env pool {kind!r}; valid env pools: {', '.join(POOL_KINDS)}")
