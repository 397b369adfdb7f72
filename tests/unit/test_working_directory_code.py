"""The processes agentforge starts with `python -m` never run code from the working directory (issue 57, item 4):
a stray `agentforge/` package in the directory a user starts a run from must not be imported in place of ours."""

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
