"""The quiet first screen: other software's output (Python prints, warnings, C-level writes, subprocesses) goes to the
run's console.log; agentforge's console, warnings and logged warnings reach the terminal; `verbose` shows both; a
traceback after an error is printed on the terminal."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

PROGRAM = textwrap.dedent("""
    import logging, os, subprocess, sys, warnings
    from rich.console import Console
    from agentforge.tracking.capture import output_to_log, terminal_out

    console = Console(stderr=True)
    with output_to_log(sys.argv[1], verbose=sys.argv[2] == "1", console=console):
        print("third-party print")
        os.write(2, b"c-level write to fd 2\\n")
        subprocess.run(["echo", "compiler subprocess line"], check=True)
        warnings.warn_explicit("a FutureWarning of another package", FutureWarning, "/x/vllm/y.py", 1)
        warnings.warn_explicit("our warning", UserWarning, "/site/agentforge/hardware.py", 1)
        logging.getLogger("agentforge.learner").warning("update skipped: batch statistics")
        logging.getLogger("vllm").warning("vllm chatter")
        console.print("progress line")
        print("dtype line", file=terminal_out())
    print("after")
    if len(sys.argv) > 3:
        with output_to_log(sys.argv[1], console=console):
            raise RuntimeError("boom")
""")

OTHERS = ("third-party print", "c-level write to fd 2", "compiler subprocess line", "FutureWarning of another",
          "vllm chatter")
OURS = ("progress line", "dtype line", "agentforge: warning: our warning",
        "agentforge: warning: update skipped: batch statistics", "after")


def run(tmp_path, verbose: bool, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path), "1" if verbose else "0", *extra],
                          capture_output=True, text=True, timeout=60)


def test_other_softwares_output_goes_to_the_log_and_ours_to_the_terminal(tmp_path):
    out = run(tmp_path, verbose=False)
    shown = out.stdout + out.stderr
    log = (tmp_path / "console.log").read_text()
    assert all(line in shown for line in OURS), shown
    assert not any(line in shown for line in OTHERS), shown
    assert all(line in log for line in OTHERS), log
    assert "our warning" in log  # the log keeps every warning, ours too


def test_verbose_shows_both_and_still_writes_the_log(tmp_path):
    out = run(tmp_path, verbose=True)
    shown = out.stdout + out.stderr
    assert all(line in shown for line in (*OURS, *OTHERS)), shown
    assert all(line in (tmp_path / "console.log").read_text() for line in OTHERS)


def test_a_traceback_reaches_the_terminal(tmp_path):
    out = run(tmp_path, False, "raise")
    assert out.returncode == 1 and "RuntimeError: boom" in out.stderr
