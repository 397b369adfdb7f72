"""Code runs only from where it should (issue 57, item 4): the processes agentforge starts with `python -m` never
import from the working directory (a stray `agentforge/` there must not run in place of ours), and a Ray that would
accept calls without a token is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.unit


def stray_package(where) -> object:
    package = where / "agentforge"
    package.mkdir()
    marker = where / "stray_code_ran"
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return marker


def test_the_reaper_does_not_import_the_working_directorys_package(tmp_path):
    marker = stray_package(tmp_path)
    start = "from agentforge.reliability.reaper import start_reaper; print(start_reaper())"
    env = {**os.environ, "AGENTFORGE_REAPER": "1", "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-P", "-c", start], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    time.sleep(3)  # the watcher imports its module at once; the stray one wrote its marker within ~0.1 s before -P
    assert not marker.exists()


def test_the_tcmalloc_re_exec_keeps_the_working_directory_off_sys_path(monkeypatch):
    from agentforge import cli

    calls = []
    monkeypatch.setenv(cli.PRELOAD_ENV, "1")
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.setattr("ctypes.util.find_library", lambda name: "libtcmalloc_minimal.so.4")
    monkeypatch.setattr(os, "execve", lambda path, argv, env: calls.append(argv))
    cli.preload_tcmalloc(["train", "recipe=debug"])
    assert calls and calls[0][1:4] == ["-P", "-m", "agentforge.cli"]


@pytest.mark.parametrize(("version", "refused"), [("2.40.0", True), ("2.51.9", True), ("2.52.0", False),
                                                   ("2.60.0", False), ("3.0.0.dev0", False)])
def test_a_ray_without_token_auth_is_refused_naming_the_fix(version, refused):
    from agentforge.cluster.ray_runtime import check_ray_version
    from agentforge.errors import ConfigError

    if refused:
        with pytest.raises(ConfigError, match=r"pip install 'ray>=2\.52'"):
            check_ray_version(version)
    else:
        check_ray_version(version)


RAY_CLIENT_SERVER_PROBE = r"""
import inspect, grpc
from ray._private import grpc_utils
from ray._private.authentication.authentication_constants import AUTHORIZATION_HEADER_NAME
from ray.util.client.server import proxier, server

# both Ray Client servers (the proxier `ray start --head` runs, and the per-job server) are built by this function
for built in (proxier.serve_proxier, server.serve):
    assert "create_grpc_server_with_interceptors(" in inspect.getsource(built), built.__qualname__

echo = grpc.method_handlers_generic_handler("probe.Echo", {
    "Say": grpc.unary_unary_rpc_method_handler(lambda request, context: request)})
grpc_server = grpc_utils.create_grpc_server_with_interceptors(max_workers=2)
grpc_server.add_generic_rpc_handlers((echo,))
port = grpc_server.add_insecure_port("127.0.0.1:0")
grpc_server.start()
say = grpc.insecure_channel(f"127.0.0.1:{port}").unary_unary("/probe.Echo/Say")
outcomes = []
for metadata in ((), ((AUTHORIZATION_HEADER_NAME, "Bearer wrong-token-0123456789"),),
                 ((AUTHORIZATION_HEADER_NAME, "Bearer probe-token-0123456789abcdef"),)):
    try:
        outcomes.append(say(b"hi", metadata=metadata, timeout=10).decode())
    except grpc.RpcError as error:
        outcomes.append(error.code().name)
print(outcomes)
grpc_server.stop(0)
"""


def test_the_ray_client_server_takes_no_call_without_the_token():
    """`ray start --head` (the Slurm launcher's head) also starts Ray's Client server; agentforge does not use it. It
    is built by Ray's gRPC server factory, which puts the token check in front of every method under token auth: a
    call without the token, or with another, is refused."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "probe-token-0123456789abcdef"}
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    done = subprocess.run([sys.executable, "-P", "-c", RAY_CLIENT_SERVER_PROBE], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['UNAUTHENTICATED', 'UNAUTHENTICATED', 'hi']"
