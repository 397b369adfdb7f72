"""ALFWorld intervention cases (TJPO paper appendix G) as data: one forbidden location category per task, with
both witness plans, stored as gzipped JSONL. `intervention_builder` finds and verifies them; the bundled file is
built by envs/build_alfworld_interventions.py."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from agentforge.envs.alfworld.games import BUNDLED_DIR, write_jsonl_gz
from agentforge.envs.data_errors import iter_jsonl, record_errors
from agentforge.errors import ConfigError

BUNDLED_CASES = BUNDLED_DIR / "interventions_valid_unseen.jsonl.gz"
BUILD_HINT = ("build a case file with `python envs/build_alfworld_interventions.py --dest <file>` or use "
              "cases=bundled")


@dataclass(frozen=True)
class InterventionCase:
    """One direction of one task: forbid `category` (its `forbidden` locations); both witness plans verified."""

    task_index: int
    game_id: str
    game_split: str
    data_source: str
    task_type: str
    task_desc: str
    category: str
    forbidden: tuple[str, ...]
    alternative_category: str
    plan_using: tuple[str, ...]
    plan_avoiding: tuple[str, ...]

    @property
    def case_id(self) -> str:
        return f"{self.game_id}#avoid-{self.category}"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("forbidden", "plan_using", "plan_avoiding"):
            out[key] = list(out[key])
        return out

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> InterventionCase:
        values = dict(row)
        for key in ("forbidden", "plan_using", "plan_avoiding"):
            values[key] = tuple(values[key])
        return cls(**values)


# -- case files ---------------------------------------------------------------------------------------------------
def cases_path(cases: str) -> Path:
    return BUNDLED_CASES if cases == "bundled" else Path(cases).expanduser()


def write_cases(cases: Iterable[InterventionCase], path: Path) -> int:
    return write_jsonl_gz((case.to_json() for case in cases), path)


@cache
def _read_cases(path: str) -> tuple[InterventionCase, ...]:
    cases = []
    for line, row in iter_jsonl(path, BUILD_HINT):
        with record_errors(path, f"line {line}", BUILD_HINT):
            cases.append(InterventionCase.from_json(row))
    if not cases:
        raise ConfigError(f"the intervention case file {path} holds no cases; {BUILD_HINT}")
    return tuple(cases)


def load_cases(cases: str | Sequence[InterventionCase] = "bundled") -> list[InterventionCase]:
    """The cases of a case file (`bundled` = the shipped one); a list of cases passes through."""
    if not isinstance(cases, str):
        if not cases:
            raise ConfigError(f"no intervention cases given; {BUILD_HINT}")
        return list(cases)
    path = cases_path(cases)
    if not path.is_file():
        raise ConfigError(f"intervention case file {path} does not exist (env.cases={cases!r}); {BUILD_HINT}")
    return list(_read_cases(str(path)))


def num_cases(cases: str = "bundled") -> int:
    return len(load_cases(cases))


