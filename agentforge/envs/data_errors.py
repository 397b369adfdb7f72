"""Reading env data files (JSON, JSON lines, gzipped JSON lines) so that a broken file is named with the fix.

Why: bundled files get truncated by a bad copy and users point envs at their own downloads. Left alone that surfaces
as a JSONDecodeError, KeyError or UnicodeDecodeError from deep inside a loader, often in a Ray worker, with no hint
which file or what to do. Every env loader reads through these helpers, and converts a record it cannot use with
`record_errors`, so each message reads `<file> line 12 is not JSON (...) — <fix>`.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentforge.errors import ConfigError


class DataFileError(ConfigError):
    """An env data file that cannot be used; the message names the file (and line or record) and the fix."""


def data_error(path: str | Path, problem: str, fix: str) -> DataFileError:
    return DataFileError(f"{path} {problem} — {fix}")


def _read_text(path: Path, fix: str) -> str:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read()
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise data_error(path, "does not exist", fix) from None
    except UnicodeDecodeError as err:
        raise data_error(path, f"is not UTF-8 text (binary or corrupted? {err.reason} at byte {err.start})",
                         fix) from None
    except (OSError, EOFError, zlib.error) as err:  # a truncated or non-gzip .gz, a folder, no permission
        raise data_error(path, f"cannot be read ({type(err).__name__}: {err})", fix) from None


def _json_problem(err: json.JSONDecodeError, text: str) -> str:
    end = text.rstrip()
    truncated = "; truncated?" if err.pos >= len(end) or end[-1:] not in ("}", "]") else ""
    return f"is not JSON ({err.msg}, line {err.lineno} column {err.colno}{truncated})"


def read_json(path: str | Path, fix: str) -> Any:
    """A whole-file JSON document; a missing, empty, binary, truncated or non-JSON file is a `DataFileError`."""
    path = Path(path)
    text = _read_text(path, fix)
    if not text.strip():
        raise data_error(path, "is empty", fix)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise data_error(path, _json_problem(err, text), fix) from None


def iter_jsonl(path: str | Path, fix: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON-lines file (gzipped when it ends in .gz); a line
    that is not a JSON object is a `DataFileError` naming its number. Reads the whole file first, so a truncated
    gzip is reported as such rather than as a bad last line."""
    path = Path(path)
    for number, line in enumerate(_read_text(path, fix).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise data_error(path, f"line {number} is not JSON ({err.msg}, column {err.colno})", fix) from None
        if not isinstance(row, dict):
            raise data_error(path, f"line {number} is {type(row).__name__}, not a JSON object", fix)
        yield number, row


def expect(value: Any, kind: type | tuple[type, ...], path: str | Path, where: str, fix: str) -> Any:
    """`value` when it has the expected type, else a `DataFileError` saying what `where` holds instead."""
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise data_error(path, f"{where} is {type(value).__name__}, expected {names}", fix)
    return value


@contextmanager
def record_errors(path: str | Path, where: str, fix: str) -> Iterator[None]:
    """Turn what converting one record raises (a missing key, a wrong type, a bad number) into a `DataFileError`
    naming the file and the record; agentforge's own errors pass through."""
    try:
        yield
    except ConfigError:
        raise
    except KeyError as err:
        raise data_error(path, f"{where} lacks the field {err}", fix) from None
    except (TypeError, ValueError, AttributeError) as err:
        raise data_error(path, f"{where} has a field of the wrong type or value ({type(err).__name__}: {err})",
                         fix) from None
