"""The suite's file order under xdist (tests/conftest.py): the heaviest files first, each file's tests together and in
their own order, and the seconds it reads name files that exist."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import FILE_SECONDS, UNKNOWN_FILE_SECONDS, heaviest_files_first

pytestmark = pytest.mark.unit


@dataclass
class Item:
    nodeid: str


def test_heaviest_files_first_keeping_each_files_tests_together_and_in_order():
    seconds = json.loads(FILE_SECONDS.read_text())
    heavy, light = next(iter(seconds)), min(seconds, key=seconds.get)
    assert seconds[heavy] > UNKNOWN_FILE_SECONDS > seconds[light]
    new_stack = "tests/integration/test_not_measured_yet.py"  # a new integration file: may start a training stack
    new_unit = "tests/unit/test_not_measured_yet.py"
    items = [Item(f"{path}::test_{i}") for path in (new_unit, light, heavy, new_stack) for i in range(3)]
    heaviest_files_first(items)  # type: ignore[arg-type]
    order = [item.nodeid for item in items]
    assert [nodeid.split("::")[0] for nodeid in order[::3]] == [heavy, new_stack, light, new_unit]
    assert order[:3] == [f"{heavy}::test_{i}" for i in range(3)]


def test_the_measured_seconds_name_files_that_exist():
    missing = [path for path in json.loads(FILE_SECONDS.read_text()) if not Path(path).is_file()]
    assert not missing, (f"{FILE_SECONDS.name} names files that are gone: {missing}; refresh it from a full run's "
                         ".test-file-durations.json (files >= 3 s)")
