"""The host's half of the namespaces: which interpreter and which paths the sandbox gets, whether this machine can
make the namespaces at all, and the uid/gid maps the host writes for each sandbox.

Why the host writes the maps (not `unshare -r`): on a root host the snippet must not run as the kernel's uid 0
(RLIMIT_NPROC is not enforced for it, and it owns every root-owned file), so the map gives the sandbox two ids,
0 (to build the root) and 65534 (nobody, to run the snippet). util-linux maps several ids only through newuidmap,
which is not installed everywhere; a parent with CAP_SETUID may simply write the map itself.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from functools import cache
from pathlib import Path

from agentforge.errors import AgentforgeError

NOBODY = 65534
SYMLINK_OR_DIR = ("/bin", "/lib", "/lib64", "/lib32", "/libx32", "/sbin")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
UNAVAILABLE_FIX = (
    "enable unprivileged user namespaces (sysctl -w user.max_user_namespaces=15000; Debian/Ubuntu before 24.04: "
    "sysctl -w kernel.unprivileged_userns_clone=1; Ubuntu 24.04+: sysctl -w "
    "kernel.apparmor_restrict_unprivileged_userns=0; in Docker: --security-opt seccomp=unconfined or a seccomp "
    "profile allowing unshare/mount/pivot_root), or, for trusted code only, set the env's "
    "sandbox.isolation=rlimits_only (no file or network isolation)"
)


class SandboxUnavailable(AgentforgeError):
    """This machine cannot build the sandbox's namespaces; the message names the cause and the fix."""


@cache
def base_python() -> str:
    """The interpreter the snippets run on: the venv's base interpreter (stdlib only; no venv on its path)."""
    executable = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(executable)


@cache
def hidden_paths() -> tuple[str, ...]:
    """Installed packages next to the stdlib (the base's site-packages, Debian's dist-packages): hidden under an
    empty tmpfs, so the snippet sees the standard library and nothing the trainer installed."""
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    paths = {sysconfig.get_paths(vars=base)[key] for key in ("purelib", "platlib")}
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    paths |= {"/usr/lib/python3/dist-packages", f"/usr/local/lib/python{version}/dist-packages",
              f"/usr/lib/python{version}/site-packages", f"/usr/local/lib/python{version}/site-packages"}
    return tuple(sorted(os.path.realpath(p) for p in paths if os.path.isdir(p)))


@cache
def mounts() -> tuple[tuple[str, str], ...]:
    """[host path, kind]: what the new root holds (kind: dir, file, device, symlink:<target>)."""
    out: list[tuple[str, str]] = [("/usr", "dir")]
    for path in SYMLINK_OR_DIR:
        if os.path.islink(path):
            out.append((path, "symlink:" + os.readlink(path)))
        elif os.path.isdir(path):
            out.append((path, "dir"))
    prefix = os.path.realpath(sys.base_prefix)
    if not any(prefix == p or prefix.startswith(p + "/") for p, kind in out if kind == "dir"):
        out.append((prefix, "dir"))
    if os.path.isfile("/etc/ld.so.cache"):
        out.append(("/etc/ld.so.cache", "file"))
    out += [(device, "device") for device in DEVICES if os.path.exists(device)]
    return tuple(out)


def mounted(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p, kind in mounts() if kind == "dir")


@cache
def check_host() -> None:
    """Fail, naming the cause and the fix, where the namespaces cannot be made (checked once per process; the
    first sandboxed call then proves the whole path)."""
    if shutil.which("unshare") is None:
        raise SandboxUnavailable("the sandbox needs util-linux's `unshare` (apt-get install util-linux), and it "
                                 f"is not on PATH; or {UNAVAILABLE_FIX}")
    limit = Path("/proc/sys/user/max_user_namespaces")
    if limit.is_file() and limit.read_text().strip() == "0":
        raise SandboxUnavailable(f"user namespaces are disabled (/proc/sys/user/max_user_namespaces is 0): "
                                 f"{UNAVAILABLE_FIX}")
    if not mounted(base_python()):
        raise SandboxUnavailable(f"the interpreter {base_python()} is outside the paths the sandbox mounts "
                                 f"({', '.join(p for p, _ in mounts())}); run agentforge from a venv whose base "
                                 "interpreter lives under /usr or its own prefix")


def unshare_command() -> list[str]:
    """`unshare` for fresh user, mount, pid, net, ipc and uts namespaces, its child pid 1 (killed when unshare
    dies); the caps granted in the new user namespace survive the exec (`--keep-caps`) so the setup script can
    mount once the host has written the maps."""
    return [shutil.which("unshare") or "unshare", "--user", "--mount", "--net", "--pid", "--ipc", "--uts",
            "--fork", "--kill-child", "--keep-caps", "--propagation", "unchanged", "--"]


def run_as() -> tuple[int | None, int | None]:
    """(uid, gid) the snippet switches to inside; None: it stays the namespace's uid 0, without capabilities
    (an unprivileged host maps only its own uid, which is then the kernel's uid of the snippet)."""
    return (NOBODY, NOBODY) if os.geteuid() == 0 else (None, None)


def write_maps(pid: int) -> None:
    """The new user namespace's uid/gid maps, written from the host once `unshare` has made it."""
    proc = Path(f"/proc/{pid}")
    if os.geteuid() == 0:
        uids = gids = f"0 0 1\n{NOBODY} {NOBODY} 1\n"
    else:
        (proc / "setgroups").write_text("deny")
        uids, gids = f"0 {os.geteuid()} 1\n", f"0 {os.getegid()} 1\n"
    (proc / "uid_map").write_text(uids)
    (proc / "gid_map").write_text(gids)


def in_new_user_namespace(pid: int) -> bool:
    """Whether `pid` has left the host's user namespace (only then may its maps be written)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
    except OSError:
        return False
