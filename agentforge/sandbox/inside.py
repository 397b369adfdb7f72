"""The sandbox's first process, run inside fresh namespaces by `unshare` (pid 1 of its pid namespace).

Why a script of its own: it is handed to the base interpreter as `-c` text, never imported, so it runs before any
of the trainer's files are hidden and imports only the standard library (os, sys, json, ctypes). Its jobs, in order:

1. wait for the host to write this user namespace's uid/gid maps (one byte on stdin says they are written);
2. build a new root on a tmpfs: read-only, nosuid, nodev bind mounts of only what the interpreter needs (/usr, the
   base Python's prefix with its site-packages hidden under an empty tmpfs, a few /dev nodes, ld.so.cache), a
   size-limited writable tmpfs `/work` as the working directory; no /proc, no /sys, no /etc beyond ld.so.cache;
3. `pivot_root` into it and detach the old root, so no path leads back to the host's files;
4. fork the snippet's process; in it: set the rlimits, drop every capability (bounding set, ambient, inheritable),
   set no_new_privs, switch to an unprivileged uid where one is mapped (a root host), and exec `python -I -S`;
5. as init: reap every orphan until the snippet's process ends, then exit with its status (128 + signal number
   when a signal ended it). When pid 1 exits the kernel kills whatever the snippet left running.

A setup failure prints one line starting with SETUP_ERROR and exits 120 (the host turns it into a clear error).
"""

import ctypes
import json
import os
import resource
import signal
import sys

SETUP_FAILED = 120
WALL_EXCEEDED = 121
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 24, 47, 4
CAP_VERSION_3 = 0x20080522
SYS_PIVOT_ROOT, SYS_CAPSET = 155, 126  # x86_64; other architectures below
SYSCALLS = {"aarch64": (41, 91), "x86_64": (155, 126)}

libc = ctypes.CDLL(None, use_errno=True)


def fail(message):
    sys.stderr.write(f"SETUP_ERROR {message}\n")
    sys.stderr.flush()
    os._exit(SETUP_FAILED)


def check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        fail(f"{what}: {os.strerror(errno)} (errno {errno})")


def mount(source, target, fstype, flags, data=None):
    check(libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                     ctypes.c_ulong(flags), data.encode() if data else None), f"mount {source} on {target}")


def bind_read_only(source, target, is_dir=True, devices=False):
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(source, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | (0 if devices else MS_NODEV))


def build_root(cfg):
    """The new root, under `/tmp` of this mount namespace (a tmpfs mounted there: the host's /tmp is untouched)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("sandbox", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    root = "/tmp/root"
    os.mkdir(root)
    mount("sandbox-root", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path, kind in cfg["mounts"]:  # [host path, "dir" | "file" | "device" | "symlink:<target>"]
        target = root + path
        if kind.startswith("symlink:"):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(kind.split(":", 1)[1], target)
        else:
            bind_read_only(path, target, kind == "dir", kind == "device")
    for hidden in cfg["hidden"]:  # paths inside a bind mount that must stay unreadable (site-packages)
        mount("hidden", root + hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
    work = root + "/work"
    os.mkdir(work)
    mount("work", work, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['disk_bytes']},mode=0777")
    os.mkdir(root + "/box")
    with open(root + "/box/snippet.py", "w") as f:
        f.write(cfg["code"])
    os.mkdir(root + "/.old")
    pivot, _ = SYSCALLS.get(os.uname().machine, (SYS_PIVOT_ROOT, SYS_CAPSET))
    check(libc.syscall(pivot, root.encode(), (root + "/.old").encode()), "pivot_root")
    os.chdir("/")
    check(libc.umount2(b"/.old", MNT_DETACH), "detach the old root")
    os.rmdir("/.old")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def drop_privileges(cfg):
    """No capability survives the exec, no setuid binary gains any, and on a root host the uid is nobody's."""
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: past the last
            check(-1, f"drop capability {cap}")
    check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setgid(cfg["gid"])
        os.setuid(cfg["uid"])  # from uid 0 to another: the kernel clears every capability set
    header = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all empty
    _, capset = SYSCALLS.get(os.uname().machine, (SYS_PIVOT_ROOT, SYS_CAPSET))
    check(libc.syscall(capset, header, data), "clear capabilities")


def set_limits(cfg):
    for name, value in cfg["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value[0], value[1]))


def run_snippet(cfg):
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()  # its own session and group: kill(0, ...) reaches only the snippet's processes
            os.chdir("/work")
            set_limits(cfg)
            drop_privileges(cfg)
            env = {"HOME": "/work", "TMPDIR": "/work", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                   "PYTHONIOENCODING": "utf-8", "PYTHONHASHSEED": "0"}
            os.execve(cfg["python"], [cfg["python"], "-I", "-S", "-B", "-X", "utf8", "/box/snippet.py"], env)
        except BaseException as error:  # noqa: BLE001 - anything here is a setup failure the host must see
            fail(f"start the snippet: {error!r}")
    # belt and braces for the host's wall-clock kill (a host that died cannot kill us): a handler, since pid 1 of
    # a pid namespace ignores signals it does not handle
    signal.signal(signal.SIGALRM, lambda *_: os._exit(WALL_EXCEEDED))
    signal.alarm(int(cfg["alarm_seconds"]))
    while True:  # init: reap orphans until the snippet's own process ends
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(SETUP_FAILED)
        if done == pid:
            sys.stdout.flush()
            os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def main():
    cfg = json.loads(sys.argv[1])
    if os.read(0, 1) != b"g":  # the host closed stdin without writing our maps: it gave up
        os._exit(SETUP_FAILED)
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        build_root(cfg)
    except OSError as error:
        fail(f"build the sandbox root: {error}")
    run_snippet(cfg)


main()
