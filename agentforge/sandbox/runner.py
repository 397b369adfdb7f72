"""`Sandbox.run(code)`: one snippet of Python in its own sandbox process, within the configured limits.

Each call starts `unshare` (fresh user, mount, pid, net, ipc, uts namespaces), writes its uid/gid maps, lets the
setup script (`inside.py`) build a private root and exec the snippet, reads at most `output_bytes` of stdout and
stderr each, and kills the whole process group at the wall-clock limit. The caller's process is never the
snippet's parent (the sandbox is a session of its own), so nothing the snippet does reaches the caller.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from agentforge.sandbox import host
from agentforge.sandbox.limits import NAMESPACES, RLIMITS_ONLY, SandboxLimits
from agentforge.sandbox.result import OUTPUT_LIMIT, TOO_LONG, WALL_LIMIT, SandboxResult, describe_exit

log = logging.getLogger("agentforge.sandbox")

INSIDE = (Path(__file__).parent / "inside.py").read_text()
SETUP_FAILED, WALL_EXCEEDED = 120, 121
DRAIN_FACTOR = 16  # a snippet that writes more than this × output_bytes is stopped (it would only burn CPU)
MAP_WAIT_SECONDS = 5.0
# rlimits_only: the same limits without namespaces (set in the child before it execs the snippet)
RLIMITS_WRAPPER = """import json, os, resource, sys
cfg = json.loads(sys.argv[1])
for name, value in cfg["rlimits"].items():
    resource.setrlimit(getattr(resource, name), tuple(value))
os.execve(cfg["python"], [cfg["python"], "-I", "-S", "-B", "-X", "utf8", sys.argv[2]], cfg["env"])
"""
CHILD_ENV = {"HOME": "/work", "TMPDIR": "/work", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
             "PYTHONIOENCODING": "utf-8", "PYTHONHASHSEED": "0"}


class Sandbox:
    """Runs snippets; holds only the limits, so it is cheap to build and safe to share across threads."""

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.limits = limits or SandboxLimits()
        if self.limits.isolation == NAMESPACES:
            host.check_host()
        else:
            log.warning("SANDBOX WEAKENED: sandbox.isolation=rlimits_only runs snippets with rlimits, a cleared "
                        "environment and a temporary directory only; they can read the host's files and use the "
                        "network. Use it for trusted code only; the default (namespaces) isolates both.")

    def run(self, code: str) -> SandboxResult:
        """Run `code` (Python source) and return what it printed and why it stopped."""
        if not isinstance(code, str):
            raise TypeError(f"Sandbox.run takes Python source as str, got {type(code).__name__}")
        size = len(code.encode("utf-8", "surrogatepass"))
        if size > self.limits.max_code_bytes:  # model output, not a config error: an observation, nothing run
            return SandboxResult("", "", TOO_LONG, -1, False, 0.0,
                                 f"not run: the code is {size} bytes, over the limit of {self.limits.max_code_bytes}")
        if self.limits.isolation == RLIMITS_ONLY:
            return self._run_rlimits_only(code)
        return self._run_namespaced(code)

    # -- the namespaced path ------------------------------------------------------------------------------------
    def _run_namespaced(self, code: str) -> SandboxResult:
        limits = self.limits
        uid, gid = host.run_as()
        cfg = {"code": code, "python": host.base_python(), "mounts": host.mounts(), "hidden": host.hidden_paths(),
               "disk_bytes": limits.disk_mb * 1024 * 1024, "rlimits": limits.rlimits(), "uid": uid, "gid": gid,
               "alarm_seconds": int(limits.wall_seconds) + 2}
        command = [*host.unshare_command(), host.base_python(), "-I", "-S", "-B", "-c", INSIDE, json.dumps(cfg)]
        start = time.monotonic()
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True, env={"PATH": "/usr/bin:/bin"}, cwd="/")
        try:
            self._write_maps(process)
        except BaseException:
            _kill(process)
            raise
        return self._collect(process, start)

    def _write_maps(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + MAP_WAIT_SECONDS
        while not host.in_new_user_namespace(process.pid):
            if process.poll() is not None or time.monotonic() > deadline:
                _kill(process)
                err = process.stderr.read().decode(errors="replace").strip() if process.stderr else ""
                why = err or f"no user namespace after {MAP_WAIT_SECONDS:g} s"
                raise host.SandboxUnavailable(f"`unshare` could not make the sandbox's namespaces ({why}): "
                                              f"{host.UNAVAILABLE_FIX}")
            time.sleep(0.0005)
        try:
            host.write_maps(process.pid)
        except OSError as error:
            _kill(process)
            raise host.SandboxUnavailable(f"cannot write the sandbox's uid/gid maps ({error}): "
                                          f"{host.UNAVAILABLE_FIX}") from None
        assert process.stdin is not None
        process.stdin.write(b"g")
        process.stdin.close()

    # -- the weaker path ----------------------------------------------------------------------------------------
    def _run_rlimits_only(self, code: str) -> SandboxResult:
        with tempfile.TemporaryDirectory(prefix="agentforge-sandbox-") as work:
            snippet = Path(work) / "snippet.py"
            snippet.write_text(code)
            env = {**CHILD_ENV, "HOME": work, "TMPDIR": work}
            cfg = {"rlimits": self.limits.rlimits(), "python": host.base_python(), "env": env}
            start = time.monotonic()
            process = subprocess.Popen([host.base_python(), "-I", "-S", "-c", RLIMITS_WRAPPER, json.dumps(cfg),
                                        str(snippet)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, start_new_session=True, env=env, cwd=work)
            return self._collect(process, start)

    # -- output and limits --------------------------------------------------------------------------------------
    def _collect(self, process: subprocess.Popen[bytes], start: float) -> SandboxResult:
        limits = self.limits
        cap, stop_at = limits.output_bytes, limits.output_bytes * DRAIN_FACTOR
        kept: dict[int, bytearray] = {}
        seen: dict[int, int] = {}
        selector = selectors.DefaultSelector()
        for stream in (process.stdout, process.stderr):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            selector.register(stream, selectors.EVENT_READ)
            kept[stream.fileno()], seen[stream.fileno()] = bytearray(), 0
        deadline = start + limits.wall_seconds
        stopped = ""
        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    stopped = WALL_LIMIT
                    break
                for key, _ in selector.select(timeout=min(left, 0.5)):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    seen[key.fd] += len(chunk)
                    room = cap - len(kept[key.fd])
                    if room > 0:
                        kept[key.fd] += chunk[:room]
                if any(n > stop_at for n in seen.values()):
                    stopped = OUTPUT_LIMIT
                    break
            if stopped:
                _kill(process)
            try:
                code = process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stopped = WALL_LIMIT
                _kill(process)
                code = process.wait()
        finally:
            selector.close()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
        seconds = time.monotonic() - start
        stdout, stderr = (bytes(v) for v in kept.values())
        truncated = any(n > cap for n in seen.values())
        return self._result(stdout, stderr, code, stopped, truncated, seconds)

    def _result(self, stdout: bytes, stderr: bytes, code: int, stopped: str, truncated: bool,
                seconds: float) -> SandboxResult:
        limits = self.limits
        err_text = stderr.decode("utf-8", errors="replace")
        if code == SETUP_FAILED and "SETUP_ERROR" in err_text:
            raise host.SandboxUnavailable(f"the sandbox could not be built: {err_text.strip()}; "
                                          f"{host.UNAVAILABLE_FIX}")
        if stopped == WALL_LIMIT or code == WALL_EXCEEDED:
            status, note, code = WALL_LIMIT, f"stopped: wall time limit of {limits.wall_seconds:g} s exceeded", -1
        elif stopped == OUTPUT_LIMIT:
            status, note, code = OUTPUT_LIMIT, (f"stopped: it wrote more than {limits.output_bytes * DRAIN_FACTOR} "
                                                "bytes of output"), -1
        else:
            status, note = describe_exit(code if code >= 0 else 128 - code, limits.cpu_seconds)
        if truncated:
            note = "; ".join(n for n in (note, f"output cut to the first {limits.output_bytes} bytes of each "
                                               "stream") if n)
        return SandboxResult(stdout.decode("utf-8", errors="replace"), err_text, status, code, truncated,
                             seconds, note)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """The whole sandbox: its session's process group (unshare and, through --kill-child, its namespace)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
