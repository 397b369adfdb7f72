"""Reading ALFWorld game files from outside data safely: broken files are named, Fast Downward is contained.

Why: a game folder from a download or another tool can hold a truncated or non-JSON `game.tw-pddl`, or PDDL that
Fast Downward cannot parse. Left alone, that surfaces as a raw traceback, or worse: Fast Downward's translator
parses `sys.argv` with argparse when its `options` module is first imported, and `pddl2sas` overwrites `sys.argv`
on every game load. A parse error raised in a Ray env worker and unpickled in the driver imported that module
there, which parsed agentforge's own command line and exited with a misleading "unrecognized arguments".
Here every engine load runs with the translator's argv and restores the caller's afterwards, and any failure
becomes a `GameFileError` (a plain agentforge error, safe to pickle) that names the file and the fix.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from agentforge.errors import ConfigError

GAME_KEYS = ("pddl_domain", "grammar", "pddl_problem")
TRANSLATE_ARGV = ("translate.py", "domain", "task")  # what fast_downward's `options` module expects to parse
SKIP_OPTION = "env.skip_broken_games=true"
FIX = (f"re-download it (alfworld-download) or regenerate it (alfworld-generate, envs/alfworld/generate_games.py), "
       f"remove its folder, or set {SKIP_OPTION} to skip broken games with a warning")


class GameFileError(ConfigError):
    """An ALFWorld game file that cannot be played; the message names the file and the fix."""


def broken_message(path: str | Path, problem: str) -> str:
    return f"ALFWorld game file {path} is broken: {problem}; {FIX}"


@contextmanager
def fast_downward_argv() -> Iterator[None]:
    """Run Fast Downward with the argv its translator expects, and give the caller's `sys.argv` back afterwards.

    The first import of `fast_downward.translate.options` happens in here, so it parses the translator's argv,
    never the CLI's (later imports, e.g. while unpickling one of its exceptions, reuse the parsed module).
    """
    saved = sys.argv
    sys.argv = list(TRANSLATE_ARGV)
    try:
        with suppress(ImportError):  # not installed: the engine's own import error names the install command
            import fast_downward.translate.options  # noqa: F401  (parses sys.argv once, at first import)
        yield
    finally:
        sys.argv = saved


def preload_translator() -> None:
    """Import Fast Downward's option module under the translator's argv (no-op when it is not installed)."""
    with fast_downward_argv():
        pass


@contextmanager
def engine_errors(game: str) -> Iterator[None]:
    """Turn whatever the engine raises while loading a game (Fast Downward raises `SystemExit` for some PDDL
    errors) into a `GameFileError` naming `game`; the original class stays out of it (it may not unpickle)."""
    try:
        with fast_downward_argv():
            yield
    except GameFileError:
        raise
    except (Exception, SystemExit) as err:
        detail = " ".join(str(err).split()) or "no message"
        raise GameFileError(broken_message(game, f"the ALFWorld engine could not load it ({type(err).__name__}: "
                                                 f"{detail[:300]})")) from None


def read_game_data(path: str | Path) -> dict[str, Any]:
    """A `game.tw-pddl` as a dict, or a `GameFileError` saying whether it is unreadable, not JSON (truncated?) or
    lacks the keys the engine needs."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise GameFileError(broken_message(path, f"it cannot be read ({err})")) from None
    problem = text_problem(text)
    if problem is not None:
        raise GameFileError(broken_message(path, problem))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise GameFileError(broken_message(path, f"it is not valid JSON ({err}; truncated?)")) from None
    if not isinstance(data, dict):
        raise GameFileError(broken_message(path, "it is JSON but not an object"))
    missing = [key for key in GAME_KEYS if not isinstance(data.get(key), str) or not data[key].strip()]
    if missing:
        raise GameFileError(broken_message(path, f"it lacks {', '.join(missing)}"))
    return data


def text_problem(text: str) -> str | None:
    """A cheap check of a game file's text (no JSON parse): what is wrong with it, or None when it looks whole."""
    stripped = text.strip()
    if not stripped:
        return "it is empty"
    if not stripped.startswith("{"):
        return "it is not JSON (a game.tw-pddl is a JSON object)"
    if not stripped.endswith("}"):
        return "it ends mid-file (truncated download or copy?)"
    if '"pddl_problem"' not in stripped:
        return "it has no pddl_problem"
    return None
