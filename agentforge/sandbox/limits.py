"""What one sandboxed call may use: the limits, checked once where they are configured (`env.sandbox: {...}`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from agentforge.errors import ConfigError

NAMESPACES = "namespaces"  # the default: user, mount, pid, net, ipc and uts namespaces + pivot_root + rlimits
RLIMITS_ONLY = "rlimits_only"  # a weaker mode, only when asked for: rlimits, a cleared env, a temp dir; no isolation
ISOLATIONS = (NAMESPACES, RLIMITS_ONLY)


@dataclass(frozen=True)
class SandboxLimits:
    """Per call. Defaults fit a snippet that computes with the standard library in well under a second."""

    cpu_seconds: float = 5.0  # RLIMIT_CPU (rounded up to whole seconds; SIGXCPU then SIGKILL one second later)
    wall_seconds: float = 10.0  # the host kills the whole sandbox after this long
    memory_mb: int = 256  # RLIMIT_AS: address space of each process (a Python start maps ~30 MB)
    processes: int = 16  # RLIMIT_NPROC: processes and threads of the sandbox's own uid (fork bombs stop here)
    output_bytes: int = 8192  # stdout and stderr, each; the rest is cut and the observation says so
    disk_mb: int = 16  # the size of the private /work tmpfs, and RLIMIT_FSIZE (largest file)
    open_files: int = 64  # RLIMIT_NOFILE
    max_code_bytes: int = 65536  # a longer snippet is refused before anything starts
    isolation: str = NAMESPACES  # "namespaces" or (weaker, said loudly at start) "rlimits_only"

    help: ClassVar[dict[str, str]] = {
        "cpu_seconds": "CPU seconds per call (RLIMIT_CPU)",
        "wall_seconds": "wall-clock seconds per call; the sandbox is killed after",
        "memory_mb": "address space per process, MiB (RLIMIT_AS)",
        "processes": "processes and threads the snippet may run at once (RLIMIT_NPROC)",
        "output_bytes": "stdout and stderr kept per call, each; longer output is cut and marked",
        "disk_mb": "size of the private working directory /work (tmpfs), MiB; also the largest file",
        "open_files": "open file descriptors per process (RLIMIT_NOFILE)",
        "max_code_bytes": "longest snippet accepted",
        "isolation": "namespaces (default) | rlimits_only (no file system or network isolation: trusted code only)",
    }

    def __post_init__(self) -> None:
        positive = {"cpu_seconds": 0.1, "wall_seconds": 0.1, "memory_mb": 32, "processes": 2, "output_bytes": 64,
                    "disk_mb": 1, "open_files": 8, "max_code_bytes": 16}
        for name, low in positive.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
                raise ConfigError(f"sandbox.{name}={value!r}: must be a number >= {low} ({self.help[name]}); "
                                  f"e.g. sandbox.{name}={SandboxLimits.__dataclass_fields__[name].default}")
        if self.isolation not in ISOLATIONS:
            raise ConfigError(f"sandbox.isolation={self.isolation!r}: must be one of {', '.join(ISOLATIONS)} "
                              "(rlimits_only only for trusted code: it does not hide files or the network)")

    @classmethod
    def from_options(cls, options: dict[str, Any] | None) -> SandboxLimits:
        """From a config section: unknown keys are named with the valid ones."""
        options = dict(options or {})
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise ConfigError(f"unknown sandbox option(s) {', '.join(unknown)}; valid: {', '.join(names)}")
        return cls(**options)

    def rlimits(self) -> dict[str, tuple[int, int]]:
        """RLIMIT name -> (soft, hard) for the snippet's process (inherited by its children)."""
        cpu = max(1, int(-(-self.cpu_seconds // 1)))
        disk = self.disk_mb * 1024 * 1024
        return {"RLIMIT_CPU": (cpu, cpu + 1), "RLIMIT_AS": (self.memory_mb * 1024 * 1024,) * 2,
                "RLIMIT_NPROC": (self.processes,) * 2, "RLIMIT_FSIZE": (disk, disk),
                "RLIMIT_NOFILE": (self.open_files,) * 2, "RLIMIT_CORE": (0, 0)}
