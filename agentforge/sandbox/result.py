"""What one sandboxed call gave back, and how it reads as an env observation."""

from __future__ import annotations

import signal
from dataclasses import dataclass

OK = "ok"  # exited 0
ERROR = "error"  # exited non-zero (an exception: the traceback is in stderr)
CPU_LIMIT = "cpu_limit"
WALL_LIMIT = "wall_limit"
OUTPUT_LIMIT = "output_limit"
KILLED = "killed"  # ended by a signal that is not a limit's (e.g. it killed itself)
TOO_LONG = "too_long"  # refused before it ran: longer than max_code_bytes (a model's runaway output)


@dataclass(frozen=True)
class SandboxResult:
    stdout: str
    stderr: str
    status: str
    exit_code: int  # the snippet's exit status; 128 + n when signal n ended it; -1 when the host killed it
    truncated: bool  # stdout or stderr was cut at `output_bytes`
    seconds: float  # wall time of the call, start of the sandbox to its end
    note: str = ""  # one line saying why it stopped, when it did not simply exit

    @property
    def ok(self) -> bool:
        return self.status == OK

    def observation(self, limit_note: bool = True) -> str:
        """The text a model reads: stdout, stderr (when there is any), and why it stopped when it was stopped."""
        parts = []
        if self.stdout:
            parts.append(f"stdout:\n{self.stdout.rstrip()}")
        if self.stderr:
            parts.append(f"stderr:\n{self.stderr.rstrip()}")
        if not parts:
            parts.append("(no output)" if self.ok else f"(no output; exit status {self.exit_code})")
        if self.note and limit_note:
            parts.append(f"[{self.note}]")
        return "\n".join(parts)


def describe_exit(code: int, cpu_seconds: float) -> tuple[str, str]:
    """(status, note) from the snippet's exit status as the sandbox's init reports it."""
    if code == 0:
        return OK, ""
    if code > 128:
        number = code - 128
        if number == signal.SIGXCPU:
            return CPU_LIMIT, f"stopped: CPU time limit of {cpu_seconds:g} s exceeded"
        name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else f"signal {number}"
        if number == signal.SIGKILL:
            return KILLED, f"stopped by {name} (the CPU time hard limit, or the snippet killed itself)"
        return KILLED, f"stopped by {name}"
    return ERROR, f"exit status {code}"
