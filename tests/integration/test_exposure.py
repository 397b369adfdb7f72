"""Exposure (issue 14 item 6): the Ray runtime agentforge starts listens on loopback only and requires a token;
wandb stays offline unless asked. Real Ray processes, their real sockets (psutil)."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration

# Runs in a fresh interpreter: the runtime must be the one ensure_ray() starts (not a test's earlier ray.init), and
# the environment must carry no auth choice of the caller's.
PROBE = textwrap.dedent("""
    import json, os, stat, psutil, ray
    from agentforge.hosting.pool import ensure_ray
    ensure_ray(num_cpus=1)

    @ray.remote(num_cpus=0)
    class Echo:
        def pid(self):
            return os.getpid()

    actor = Echo.remote()
    ray.get(actor.pid.remote())  # a worker process exists and answers
    listening = []
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    listening.append([proc.name(), conn.laddr.ip, conn.laddr.port])
        except psutil.Error:
            pass
    token_path = os.environ.get("RAY_AUTH_TOKEN_PATH", "")
    print("RESULT " + json.dumps({
        "listening": listening, "mode": os.environ.get("RAY_AUTH_MODE"), "token_path": token_path,
        "token_mode": oct(stat.S_IMODE(os.stat(token_path).st_mode)) if token_path else None,
        "gcs": ray.get_runtime_context().gcs_address,
    }))
    ray.shutdown()
""")


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "AGENTFORGE_RAY"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run_probe(env: dict[str, str]) -> dict:
    import json

    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=180)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, f"probe failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return json.loads(line[len("RESULT "):])


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def test_local_ray_runtime_listens_on_loopback_only_with_token_auth() -> None:
    result = _run_probe(_clean_env())
    ports = result["listening"]
    names = {name for name, _, _ in ports}
    assert any("gcs_server" in n for n in names) and any("raylet" in n for n in names), ports  # the real servers
    exposed = [p for p in ports if not _is_loopback(p[1])]
    assert not exposed, f"Ray processes listen beyond loopback: {exposed}"
    assert result["gcs"].startswith("127.0.0.1:"), result["gcs"]
    assert result["mode"] == "token"
    assert result["token_mode"] == "0o600", result  # only this user can read the token
    assert not os.path.exists(result["token_path"]), "the token file outlives its runtime"


def test_a_client_without_the_token_is_refused() -> None:
    """Auth is really on: a second process that knows the address but not the token cannot connect."""
    probe = textwrap.dedent("""
        import os, ray, time
        from agentforge.hosting.pool import ensure_ray
        ensure_ray(num_cpus=1)
        address = ray.get_runtime_context().gcs_address
        import subprocess, sys
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")}
        env["RAY_AUTH_MODE"] = "token"
        env["RAY_AUTH_TOKEN"] = "0" * 64  # a wrong token
        # the intruder is on this machine and reaches loopback (Ray would rewrite 127.0.0.1 otherwise)
        code = ("import ray, ray._private.services as s; s.resolve_ip_for_localhost = lambda a: a; "
                "ray.init(address=%r, log_to_driver=False); print('CONNECTED')" % address)
        intruder = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
        # Ray keeps retrying a refused client: its first refusal for the token is the answer (20 s at most)
        import threading
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(intruder.stdout), daemon=True)
        reader.start()
        deadline = time.monotonic() + 20
        while intruder.poll() is None and time.monotonic() < deadline:
            if any("InvalidAuthToken" in ln or "CONNECTED" in ln for ln in list(lines)):
                break
            time.sleep(0.2)
        intruder.kill()
        intruder.wait()
        reader.join(timeout=5)
        out = "".join(lines)
        print("INTRUDER", any(ln.strip() == "CONNECTED" for ln in lines), "InvalidAuthToken" in out)
        ray.shutdown()
    """)
    proc = subprocess.run([sys.executable, "-c", probe], env=_clean_env(), capture_output=True, text=True,
                          timeout=240)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("INTRUDER")), None)
    assert line, f"probe failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert line == "INTRUDER False True", line


def test_wandb_stays_offline_unless_asked() -> None:
    from agentforge.schema.compose import compose_config

    cfg = compose_config(["recipe=debug", "command=train"])
    assert cfg.logger.wandb_mode == "offline"
