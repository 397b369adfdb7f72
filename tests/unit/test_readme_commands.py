"""Every `agentforge …` line in the code blocks of README.md and the quick-start docs works as written (issue 59):
a training-side command composes (its config checked as the CLI checks it, without starting anything), a plain
command runs or shows its help with exit 0; a Python block headed by its file name (`# mypkg/descriptors.py`) is
written where the command imports it. A line that needs a finished run (`<time>` placeholders) is checked as far
as it can be without one, and the test that walks it on a real run is named."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from agentforge.cli import HYDRA_COMMANDS, PLAIN_COMMANDS, command_shorthands, main, split_hydra_args

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/cluster.md", "docs/environments.md", "docs/export.md", "docs/t2po.md")
# lines that name a finished run's dir: the command is checked up to that dir (its --help, or composing with the
# path left out); the test that runs it on a real run
NEEDS_A_RUN = {
    "export": "tests/integration/test_export.py",
    "serve": "tests/integration/test_export.py",
    "view": "tests/unit/test_viewer.py",
    "sweep-report": "tests/integration/test_sweep_report.py",
}
PATH_KEYS = ("checkpoint", "model.init_from")  # a run's dir as a value: `<time>` cannot be filled without a run


def readme_commands(path: Path = ROOT / "README.md") -> list[list[str]]:
    """The argument lists of the `agentforge …` lines of the file's code blocks (continuations joined, comments
    dropped)."""
    commands = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", path.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if not line.startswith("agentforge "):
                continue
            args = shlex.split(line, comments=True)[1:]
            if args and args[0] in (*HYDRA_COMMANDS, *PLAIN_COMMANDS) and "=" not in args:  # not a diagram's text
                commands.append(args)
    return commands


def doc_commands() -> list[tuple[str, list[str]]]:
    return [(doc, args) for doc in DOCS for args in readme_commands(ROOT / doc)]


def check(args: list[str]) -> tuple[str, list[str]]:
    """('ok' | a reason, the problems found) for one README line."""
    from agentforge.commands.overrides import override_problems

    command, rest = args[0], args[1:]
    if command in HYDRA_COMMANDS:
        overrides = split_hydra_args(rest)[1]
        unfillable = [o for o in overrides if "<" in o and o.split("=", 1)[0] in PATH_KEYS]
        overrides = [o for o in overrides if o not in unfillable]
        if any("<" in o for o in overrides):
            return "a placeholder outside a run path", overrides
        problems, _ = override_problems([f"command={command}", *command_shorthands(command, overrides)])
        return ("ok" if not unfillable else "composed without " + ", ".join(unfillable)), problems
    if command == "sweep-report" or (command in NEEDS_A_RUN and any("<" in a or "*" in a for a in rest)):
        return f"needs a run: walked by {NEEDS_A_RUN[command]}", [] if status([command, "--help"]) == 0 else ["--help"]
    if command == "launch" and "--dry-run" not in rest:
        args = [*args, "--dry-run"]  # rendered and checked, not submitted
    return "ok", [] if status(args) == 0 else [f"exit status of agentforge {' '.join(args)}"]


def status(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as stop:  # --help exits
        return int(stop.code or 0)


def test_the_readme_has_the_commands_a_user_starts_with():
    words = {args[0] for args in readme_commands()}
    assert {"train", "eval", "sft", "rft", "rollout", "envs", "export", "serve", "config", "view",
            "sweep-report"} <= words


@pytest.fixture
def readme_modules(tmp_path, monkeypatch) -> None:
    """The docs' user modules (`# mypkg/descriptors.py` as a Python block's first line), written as given and
    importable, as the user who copies them has them."""
    for doc in DOCS:
        for block in re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.S):
            first = block.splitlines()[0].removeprefix("# ").strip()
            if first.endswith(".py") and "/" in first and " " not in first:
                target = tmp_path / first
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block)
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.parametrize(("doc", "args"), doc_commands(), ids=lambda v: v if isinstance(v, str) else " ".join(v)[:70])
def test_every_readme_command_composes_as_written(doc, args, capsys, readme_modules):
    if args[:2] == ["envs", "check"]:
        args = ["envs", "list"]  # `envs check` builds every env named: tests/integration/test_envs_command.py does
    how, problems = check(args)
    assert problems == [], f"{doc}: agentforge {' '.join(args)} ({how}): {problems}"
