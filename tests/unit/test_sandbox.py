"""The code sandbox against the attacks issue 53 names, one test each: every test runs a real snippet in the real
sandbox (fresh namespaces, rlimits) and checks both what the snippet saw and that the caller is unharmed."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentforge.errors import ConfigError
from agentforge.sandbox import Sandbox, SandboxLimits
from agentforge.sandbox.result import CPU_LIMIT, ERROR, OK, OUTPUT_LIMIT, WALL_LIMIT

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(SandboxLimits(cpu_seconds=1, wall_seconds=4, memory_mb=128, processes=8, output_bytes=2000))


def snippet_processes() -> int:
    """Processes on this host still running a sandboxed snippet (any sandbox's; tests run one at a time)."""
    count = 0
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):  # a process that ended while we looked
            count += entry.name.isdigit() and b"/box/snippet.py" in (entry / "cmdline").read_bytes()
    return count


def test_stdout_stderr_and_exceptions_come_back(sandbox):
    result = sandbox.run("import sys\nprint(sum(range(10)))\nprint('warn', file=sys.stderr)\n")
    assert result.status == OK and result.exit_code == 0
    assert result.stdout == "45\n" and result.stderr == "warn\n"
    failed = sandbox.run("x = 1\nraise ValueError('bad value')\n")
    assert failed.status == ERROR and failed.exit_code == 1
    assert 'File "/box/snippet.py", line 2' in failed.stderr and "ValueError: bad value" in failed.stderr
    assert "ValueError: bad value" in failed.observation()


def test_an_infinite_loop_is_stopped_by_the_cpu_limit(sandbox):
    started = time.monotonic()
    result = sandbox.run("while True:\n    pass\n")
    assert result.status == CPU_LIMIT, result
    assert "CPU time limit of 1 s exceeded" in result.observation()
    assert time.monotonic() - started < 3.5


def test_a_sleeping_snippet_is_stopped_by_the_wall_limit():
    quick = Sandbox(SandboxLimits(wall_seconds=0.5))
    result = quick.run("import time\nprint('before', flush=True)\ntime.sleep(30)\n")
    assert result.status == WALL_LIMIT and result.seconds < 2.0
    assert result.stdout == "before\n" and "wall time limit of 0.5 s exceeded" in result.observation()


def test_a_fork_bomb_is_contained_and_the_host_keeps_forking(sandbox):
    code = ("import os\ncount = 0\nfor _ in range(200):\n    try:\n        pid = os.fork()\n    except OSError as e:\n"
            "        print('refused', e.errno, flush=True)\n        break\n    if pid == 0:\n"
            "        import time; time.sleep(10); os._exit(0)\n    count += 1\nprint('forked', count, flush=True)\n")
    result = sandbox.run(code)
    assert "refused 11" in result.stdout, result  # EAGAIN: RLIMIT_NPROC
    forked = int(result.stdout.split("forked ")[1].split()[0])
    assert forked < 8
    # the sleeping children died with the sandbox's pid namespace, and the host still forks
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True).stdout == "1\n"
    assert snippet_processes() == 0


def test_a_classic_fork_bomb_ends_within_the_wall_limit():
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = Sandbox(SandboxLimits(cpu_seconds=1, wall_seconds=1.5, processes=8)).run(bomb)
    assert result.status in (CPU_LIMIT, WALL_LIMIT, "killed"), result
    time.sleep(0.2)
    assert snippet_processes() == 0


def test_a_memory_bomb_gets_memory_error(sandbox):
    result = sandbox.run("blocks = []\nwhile True:\n    blocks.append(bytearray(16 * 1024 * 1024))\n")
    assert result.status == ERROR and "MemoryError" in result.stderr, result
    huge = sandbox.run("x = bytearray(10 ** 10)\n")
    assert "MemoryError" in huge.stderr


def test_huge_output_is_cut_and_said_so(sandbox):
    result = sandbox.run("for i in range(10 ** 9):\n    print('x' * 100)\n")
    assert result.truncated and len(result.stdout) == 2000
    assert result.status == OUTPUT_LIMIT, result
    assert "output cut to the first 2000 bytes" in result.observation()
    small = sandbox.run("print('y' * 3000)\n")  # over the cap but short: finishes, cut
    assert small.status == OK and small.truncated and small.stdout == "y" * 2000


def test_writing_outside_its_directory_fails(sandbox):
    code = ("import os\nfor path in ['/usr/evil', '/box/evil', '/evil', '/root/evil', '/etc/evil', '/dev/evil']:\n"
            "    try:\n        open(path, 'w').write('x')\n        print('WROTE', path)\n"
            "    except OSError as e:\n        print('refused', path, type(e).__name__)\n"
            "open('/work/mine.txt', 'w').write('ok')\nprint('own', open('mine.txt').read())\n")
    result = sandbox.run(code)
    assert "WROTE" not in result.stdout and result.stdout.count("refused") == 6, result
    assert "own ok" in result.stdout
    assert not Path("/usr/evil").exists() and not Path("/evil").exists()


def test_the_disk_is_bounded(sandbox):
    big = sandbox.run("open('big', 'wb').write(b'x' * (64 * 1024 * 1024))\n")
    assert "File too large" in big.stderr, big  # RLIMIT_FSIZE: the largest file
    many = sandbox.run("for i in range(4):\n    open(f'part{i}', 'wb').write(b'x' * (10 * 1024 * 1024))\n")
    assert "No space left on device" in many.stderr, many  # the /work tmpfs's size


def test_host_files_are_not_readable(sandbox):
    targets = [str(REPO / "README.md"), "/etc/shadow", "/etc/passwd", "/root", str(Path.home()),
               os.path.realpath(sys.prefix), "/proc/1/environ", "/sys/kernel"]
    code = (f"import os, json\nseen = {{}}\nfor path in json.loads({json.dumps(targets)!r}):\n    try:\n"
            "        seen[path] = os.listdir(path) if os.path.isdir(path) else open(path).read(50)\n"
            "    except OSError as e:\n        seen[path] = type(e).__name__\nprint(json.dumps(seen))\n")
    result = sandbox.run(code)
    seen = json.loads(result.stdout)
    for path in targets:
        if path in ("/root", str(Path.home())):  # only the path down to the base interpreter, nothing else
            assert seen[path] in ("FileNotFoundError", [".pyenv"], []) or set(seen[path]) <= {".pyenv"}, seen[path]
        else:
            assert seen[path] in ("FileNotFoundError", "PermissionError"), (path, seen[path])
    # the base interpreter's site-packages (what the trainer installed beside the stdlib) is an empty directory
    packages = sandbox.run("import sysconfig, os\nprint(os.listdir(sysconfig.get_paths()['purelib']))\n")
    assert packages.stdout.strip() in ("[]", ""), packages


def test_sockets_cannot_reach_the_host(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted: list[object] = []
    thread = threading.Thread(target=lambda: accepted.append(_accept(server)), daemon=True)
    thread.start()
    code = (f"import socket\nfor target in [('127.0.0.1', {port}), ('8.8.8.8', 53)]:\n    s = socket.socket()\n"
            "    s.settimeout(1)\n    try:\n        s.connect(target)\n        print('CONNECTED', target)\n"
            "    except OSError as e:\n        print('refused', type(e).__name__)\n")
    result = sandbox.run(code)
    assert "CONNECTED" not in result.stdout and result.stdout.count("refused") == 2, result
    thread.join(timeout=0.5)
    server.close()
    assert accepted in ([], [None])


def _accept(server: socket.socket) -> object:
    server.settimeout(2)
    try:
        return server.accept()
    except OSError:
        return None


def test_killing_its_parent_does_not_hurt_the_caller(sandbox):
    # its parent is the sandbox's own init (pid 1 of its pid namespace), which ignores it; -1 reaches only the
    # sandbox's processes; the caller is in another pid namespace and session, out of reach
    # (on a root host the snippet runs as nobody and may not signal its init at all: EPERM)
    result = sandbox.run("import os, signal\nparent = os.getppid()\nfor target in (parent, -1):\n    try:\n"
                         "        os.kill(target, signal.SIGKILL)\n"
                         "    except OSError:  # EPERM, or ESRCH: nothing to kill\n        pass\n"
                         "print('still here, parent', parent, flush=True)\n")
    assert result.status == OK and result.stdout == "still here, parent 1\n", result
    group = sandbox.run("import os, signal\nos.killpg(0, signal.SIGKILL)\nprint('unreachable')\n")
    assert group.status == "killed" and "SIGKILL" in group.observation() and not group.stdout
    assert sandbox.run("print(2 + 2)").stdout == "4\n"  # we are alive (this test runs on), and so is the next call


def test_the_trainers_environment_is_not_visible(sandbox, monkeypatch):
    monkeypatch.setenv("AGENTFORGE_SECRET_API_KEY", "sk-do-not-leak")
    result = sandbox.run("import os\nprint(sorted(os.environ))\nprint(open('/proc/self/environ').read())\n")
    assert "AGENTFORGE_SECRET_API_KEY" not in result.stdout and "sk-do-not-leak" not in result.stdout + result.stderr
    assert "['HOME', 'LANG', 'PATH', 'PYTHONHASHSEED', 'PYTHONIOENCODING', 'TMPDIR']" in result.stdout


def test_each_call_gets_a_fresh_working_directory(sandbox):
    first = sandbox.run("import os\nopen('left_behind.txt', 'w').write('x')\nprint(os.getcwd(), os.listdir('.'))\n")
    assert first.stdout == "/work ['left_behind.txt']\n", first
    second = sandbox.run("import os\nprint(os.listdir('.'))\n")
    assert second.stdout == "[]\n"


def test_bad_limits_and_oversized_code_are_refused_with_the_fix():
    with pytest.raises(ConfigError, match=r"sandbox.cpu_seconds=0: must be a number >= 0.1"):
        SandboxLimits(cpu_seconds=0)
    with pytest.raises(ConfigError, match="unknown sandbox option.*cpu_second.*valid: cpu_seconds"):
        SandboxLimits.from_options({"cpu_second": 1})
    with pytest.raises(ConfigError, match="isolation='none'"):
        SandboxLimits(isolation="none")
    refused = Sandbox(SandboxLimits(max_code_bytes=16)).run("print('a much longer snippet')")  # a model's output:
    assert refused.status == "too_long" and "over the limit of 16" in refused.observation()  # an observation, not run


def test_rlimits_only_is_weaker_and_says_so(caplog, tmp_path):
    with caplog.at_level("WARNING", logger="agentforge.sandbox"):
        weak = Sandbox(SandboxLimits(isolation="rlimits_only", cpu_seconds=1, wall_seconds=4))
    assert "SANDBOX WEAKENED" in caplog.text
    result = weak.run("import os\nprint(os.getcwd().startswith('/tmp') or os.getcwd(), flush=True)\nwhile True: pass\n")
    assert result.status == CPU_LIMIT and "True" in result.stdout, result
