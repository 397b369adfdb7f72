"""The Ray runtime agentforge starts or joins: loopback only and token-authenticated unless a launch says otherwise.

Why: Ray's servers (GCS, raylet, workers) accept calls that run arbitrary code. On one machine nothing outside it
needs to reach them, so the local runtime binds 127.0.0.1 (Ray rewrites a loopback node address into the
machine's reachable one inside `ray.init`; we keep it loopback for that call) and requires a token (Ray 2.60's
`RAY_AUTH_MODE=token`): a random 256-bit token in a 0600 file, passed to Ray's processes through
`RAY_AUTH_TOKEN_PATH`. A cluster built by `agentforge launch slurm` sets `RAY_ADDRESS` and its own token; this
module then only connects.

Knobs (environment): `AGENTFORGE_RAY_HOST` (default 127.0.0.1; an address to listen on instead, e.g. to let other
machines join), `RAY_AUTH_MODE` (a user's explicit choice wins; `disabled` turns auth off, with a warning).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("agentforge.launch")

HOST_ENV = "AGENTFORGE_RAY_HOST"
LOOPBACK = "127.0.0.1"


def token_file(directory: Path | None = None) -> Path:
    """A fresh random token in a file only this user can read (one per runtime: a leaked old one is useless)."""
    directory = directory or Path(os.environ.get("XDG_RUNTIME_DIR") or Path.home() / ".cache" / "agentforge")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"ray_auth_token.{os.getpid()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    atexit.register(_unlink, path)  # the runtime ends with this process; so does its token
    return path


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


MIN_RAY = (2, 52)  # the first Ray with token authentication (RAY_AUTH_MODE=token)


def check_ray_version(version: str) -> None:
    """Refuse a Ray that would start without token auth: it would accept anyone's calls, and those run code."""
    from agentforge.errors import ConfigError

    parts = [int(p) for p in version.split(".")[:2] if p.isdigit()]
    if tuple(parts) < MIN_RAY:
        raise ConfigError(f"Ray {version} has no token authentication, so its runtime would run anyone's calls; "
                          f"agentforge needs Ray >= {'.'.join(map(str, MIN_RAY))}: pip install 'ray>="
                          f"{'.'.join(map(str, MIN_RAY))}' (or make setup)")


def enable_token_auth() -> str:
    """Turn Ray's token auth on for this process and the processes it starts, unless the user chose a mode.

    Returns the mode in force. Ray reads `RAY_AUTH_MODE` into a cached config when it is imported, so the cache
    is refreshed when `ray` was imported before this call.
    """
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None:
        if mode.lower() != "token":
            log.warning("RAY_AUTH_MODE=%s: the Ray runtime accepts calls without a token", mode)
        return mode.lower()
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(token_file())
    os.environ["RAY_AUTH_MODE"] = "token"
    _refresh_ray_config()
    return "token"


def _refresh_ray_config() -> None:
    import sys

    if "ray" not in sys.modules:
        return  # read at import: nothing cached yet
    from ray._raylet import Config  # Ray's own refresh of the cached RayConfig (what its token setup calls)

    Config.initialize("")


@contextlib.contextmanager
def _keep_address(host: str) -> Iterator[None]:
    """Within `ray.init`, keep a loopback node address as given (Ray would swap in the machine's reachable IP)."""
    from ray._private import services

    original = getattr(services, "resolve_ip_for_localhost", None)
    if original is None:  # a Ray without this hook: it binds where it binds; the exposure test will say so
        log.warning("this Ray has no services.resolve_ip_for_localhost: cannot keep the runtime on %s", host)
        yield
        return
    services.resolve_ip_for_localhost = lambda address: address
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = original


def ensure_ray(num_cpus: int | None = None) -> None:
    """Start a local Ray runtime unless one is running (or connect to RAY_ADDRESS's cluster when set).

    The local runtime listens on loopback only (`AGENTFORGE_RAY_HOST` to change it) and requires Ray's token auth;
    a cluster (RAY_ADDRESS) is joined with whatever auth its launcher set (the Slurm launcher: token).
    """
    import ray

    if ray.is_initialized():
        return
    check_ray_version(ray.__version__)
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if os.environ.get("RAY_ADDRESS"):
        ray.init(**kwargs)
    else:
        enable_token_auth()
        host = os.environ.get(HOST_ENV, LOOPBACK)
        with _keep_address(host):
            ray.init(num_cpus=num_cpus, _node_ip_address=host, **kwargs)
    from agentforge.reliability.interrupt import reclaim_signal_handlers

    reclaim_signal_handlers()  # ray.init replaced the driver's SIGTERM handler (a scheduler's stop checkpoints)
