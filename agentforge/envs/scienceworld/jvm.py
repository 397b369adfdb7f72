"""Starting and stopping the `scienceworld` package's simulator (a Scala jar behind a py4j gateway).

The JVM reads its options from `_JAVA_OPTIONS` when it starts; the package launches it with the parent's
environment, so the options are put there (under a lock, then restored) just for the launch. A bounded heap and
the serial GC keep one instance at ~250 MB instead of a quarter of the machine's memory (FACTS).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from typing import Any

from agentforge.errors import ConfigError

DEFAULT_JAVA_OPTIONS = "-Xmx256m -XX:+UseSerialGC"
# Every identity hash code = 1: hash sets of world objects then iterate in insertion order. Without it the order
# follows the JVM's hash sequence, which earlier episodes advance, so the same task and actions can print objects
# in another order, heat water by a degree more or finish an electrical task a step later (measured: 7 of 30 tasks'
# gold paths differ between two JVMs with different histories; with it, all 30 match, mendelian crosses included).
DETERMINISTIC_JAVA_OPTIONS = "-XX:+UnlockExperimentalVMOptions -XX:hashCode=2"
INSTALL_HINT = "pip install 'agentforge[scienceworld]' (scienceworld==1.2.3) and a Java 17 runtime"

_LAUNCH_LOCK = threading.Lock()

# py4j logs every gateway start and callback-server event at INFO, which floods a run's log (one per env slot)
logging.getLogger("py4j").setLevel(logging.WARNING)


def require_scienceworld() -> None:
    """Fail early, with the fix, when the package or a `java` executable is missing."""
    try:
        import scienceworld  # noqa: F401
    except ImportError as err:
        raise ConfigError(f"the scienceworld env needs the scienceworld package ({err}); install it with: "
                          f"{INSTALL_HINT}") from err
    if shutil.which("java") is None:
        raise ConfigError("the scienceworld env needs a `java` executable on PATH (Java 17, e.g. "
                          "`apt-get install openjdk-17-jre-headless`); none was found")


def resolve_java_options(java_options: str | None, deterministic: bool = True) -> str:
    """The env option if set, else the caller's `$_JAVA_OPTIONS`, else the bounded default; plus the
    determinism flags unless turned off."""
    options = java_options if java_options is not None else os.environ.get("_JAVA_OPTIONS", DEFAULT_JAVA_OPTIONS)
    if deterministic and "-XX:hashCode=" not in options:
        options = f"{options} {DETERMINISTIC_JAVA_OPTIONS}".strip()
    return options


def start_simulator(java_options: str, server_path: str | None = None) -> Any:
    """A fresh `scienceworld.ScienceWorldEnv` (its own JVM) with no task loaded yet."""
    require_scienceworld()
    from scienceworld import ScienceWorldEnv as PackageEnv

    with _LAUNCH_LOCK:
        previous = os.environ.get("_JAVA_OPTIONS")
        os.environ["_JAVA_OPTIONS"] = java_options
        try:
            return PackageEnv("", serverPath=server_path)
        finally:
            if previous is None:
                os.environ.pop("_JAVA_OPTIONS", None)
            else:
                os.environ["_JAVA_OPTIONS"] = previous


def jvm_alive(simulator: Any) -> bool:
    process = simulator._gateway.java_process
    return process is not None and process.poll() is None


def jvm_pid(simulator: Any) -> int:
    return int(simulator._gateway.java_process.pid)


def stop_simulator(simulator: Any) -> None:
    """Shut the gateway down and let the JVM exit (the package's own close), once.

    The package object closes itself again when garbage-collected, and py4j logs a traceback for shutting down a
    closed gateway; the instance's `close` is made a no-op after the real one.
    """
    simulator.close()
    simulator.close = _closed


def _closed() -> None:
    return None
