"""ALFWorld game sets: the bundled generated set, the real dataset, or any folder of games in the real format.

A game in the real format is a folder with `traj_data.json` (`task_type`, `pddl_params`) and `game.tw-pddl`
(JSON: `pddl_domain`, `grammar` with the task sentence filled in, `pddl_problem`, `solvable`, `walkthrough`).
The bundled set stores only what is game-specific (problem, task parameters, task sentence, planner walkthrough)
as gzipped JSONL and assembles domain and grammar from the installed package at load time.

Splits are ALFWorld's: `train`, `valid_seen` (scenes seen in training) and `valid_unseen` (held-out scenes).
agentforge's task splits map onto them: train -> train, eval -> `eval_split` (valid_seen by default), test ->
`test_split` (valid_unseen by default). A task's seed picks the game: (seed - split base) modulo the split's size.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import logging
import os
import warnings
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from agentforge.envs.alfworld.gamefile import FIX, SKIP_OPTION, GameFileError, read_game_data, text_problem
from agentforge.envs.alfworld.task_types import TASK_TYPES, TASK_TYPES_BY_NAME
from agentforge.envs.data_errors import data_error, expect, iter_jsonl, record_errors
from agentforge.errors import ConfigError
from agentforge.tasks import SPLIT_SEED_BASE
from agentforge.types import Task

ALFWORLD_SPLITS: tuple[str, ...] = ("train", "valid_seen", "valid_unseen")
BUNDLED_DIR = Path(__file__).parent / "games"
REAL_DATA_HINT = (
    "data_source=real reads $ALFWORLD_DATA/json_2.1.1/{train,valid_seen,valid_unseen} (the folder "
    "`alfworld-download` fills); set ALFWORLD_DATA, or pass data_source=<folder with the game folders>, or use "
    "data_source=bundled"
)
SKIPPED_FOLDER_MARKS = ("movable", "Sliced")  # AlfredTWEnv skips these trajectories too
LAYOUT = "$ALFWORLD_DATA/json_2.1.1/<split>/<task>/<trial>/{traj_data.json,game.tw-pddl}"
LAYOUT_HINT = (
    f"the expected layout is {LAYOUT} (split: train, valid_seen or valid_unseen; task: a folder such as "
    "pick_and_place_simple-Pencil-None-Dresser-330; trial: a folder such as trial_T20190908_...), or the same "
    "<split>/<task>/<trial>/ folders under the folder given as data_source"
)
MAX_NAMED = 5  # broken files named in one message

log = logging.getLogger("agentforge.envs.alfworld")


@dataclass(frozen=True)
class GameRecord:
    """One game. Bundled games carry their problem text; folder games point at their `game.tw-pddl`."""

    game_id: str
    split: str
    task_type: str
    pddl_params: dict[str, Any] = field(default_factory=dict)
    task_desc: str | None = None
    floor_plan: int | None = None
    pddl_problem: str | None = None
    walkthrough: tuple[str, ...] | None = None
    path: str | None = None

    def game_data(self) -> dict[str, Any]:
        """The `game.tw-pddl` content: read from the folder, or assembled from the package's domain and grammar."""
        if self.path is not None:
            return read_game_data(self.path)
        if self.pddl_problem is None or self.task_desc is None:
            raise ConfigError(f"game {self.game_id} has neither a game file nor a problem and task sentence")
        return assemble_game_data(self.pddl_problem, self.task_desc, self.walkthrough)

    def to_bundle_json(self) -> dict[str, Any]:
        return {
            "game_id": self.game_id,
            "task_type": self.task_type,
            "pddl_params": self.pddl_params,
            "floor_plan": self.floor_plan,
            "task_desc": self.task_desc,
            "pddl_problem": self.pddl_problem,
            "walkthrough": list(self.walkthrough or ()),
        }


def package_data_dir() -> Path:
    """`alfworld/data` (alfred.pddl, alfred.twl2), found without importing alfworld (its import sets env vars)."""
    spec = importlib.util.find_spec("alfworld")
    if spec is None or spec.origin is None:
        raise ConfigError("the ALFWorld package is not installed; run scripts/install_alfworld.sh")
    return Path(spec.origin).parent / "data"


@cache
def package_logic() -> tuple[str, str]:
    """The package's PDDL domain and its grammar with the `UNKNOWN GOAL` placeholder."""
    folder = package_data_dir()
    return (folder / "alfred.pddl").read_text(), (folder / "alfred.twl2").read_text()


def fill_task(grammar: str, task_desc: str) -> str:
    """What `alfworld.agents.utils.misc.add_task_to_grammar` does with templated goals."""
    return grammar.replace("UNKNOWN GOAL", task_desc)


def assemble_game_data(pddl_problem: str, task_desc: str, walkthrough: Sequence[str] | None) -> dict[str, Any]:
    domain, grammar = package_logic()
    return {
        "pddl_domain": domain,
        "grammar": fill_task(grammar, task_desc),
        "pddl_problem": pddl_problem,
        "solvable": True,
        "walkthrough": list(walkthrough) if walkthrough is not None else None,
    }


# -- the bundled set --------------------------------------------------------------------------------------------------
def bundle_path(split: str, folder: Path = BUNDLED_DIR) -> Path:
    return folder / f"{split}.jsonl.gz"


def write_jsonl_gz(rows: Iterable[dict[str, Any]], path: Path) -> int:
    """Gzipped JSON lines with sorted keys and mtime 0: the same rows always give the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        for row in rows:
            gz.write((json.dumps(row, sort_keys=True) + "\n").encode())
            count += 1
    return count


def write_bundle(records: Iterable[GameRecord], path: Path) -> int:
    return write_jsonl_gz((record.to_bundle_json() for record in records), path)


REGENERATE_BUNDLE = ("regenerate the bundled games with `python envs/alfworld/generate_games.py` (or reinstall "
                     "agentforge)")


@cache
def load_bundle(path: str, split: str) -> tuple[GameRecord, ...]:
    """A bundled split's games; a truncated, corrupted or hand-edited bundle names its file, line and the fix."""
    if not Path(path).exists():
        raise ConfigError(f"no bundled ALFWorld games for split {split!r} at {path}; generate them with "
                          "envs/alfworld/generate_games.py")
    records = []
    for line, row in iter_jsonl(path, REGENERATE_BUNDLE):
        with record_errors(path, f"line {line}", REGENERATE_BUNDLE):
            records.append(GameRecord(
                game_id=str(row["game_id"]), split=split, task_type=str(row["task_type"]),
                pddl_params=dict(row["pddl_params"]), task_desc=str(row["task_desc"]),
                floor_plan=row.get("floor_plan"),
                pddl_problem=expect(row["pddl_problem"], str, path, f"line {line} pddl_problem", REGENERATE_BUNDLE),
                walkthrough=tuple(str(a) for a in row["walkthrough"]) if row.get("walkthrough") else None,
            ))
    if not records:
        raise data_error(path, f"holds no games (split {split!r})", REGENERATE_BUNDLE)
    return tuple(records)


# -- folders in the real format ---------------------------------------------------------------------------------------
class _Broken(Exception):
    """A game folder the scan cannot use; `problem` says why (internal to the scan)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def _solvable(game_file: Path) -> bool:
    """`solvable` of a game file without parsing the (large) JSON when the usual spelling is there; raises `_Broken`
    for a file that is unreadable, truncated or not JSON."""
    try:
        text = game_file.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise _Broken(f"it cannot be read ({err})") from None
    problem = text_problem(text)
    if problem is not None:
        raise _Broken(problem)
    if '"solvable": true' in text:
        return True
    if '"solvable": false' in text or '"solvable": null' in text:
        return False
    try:
        return bool(json.loads(text).get("solvable"))
    except (json.JSONDecodeError, AttributeError) as err:
        raise _Broken(f"it is not a valid JSON object ({err}; truncated?)") from None


def _folder_task_type(game_dir: Path) -> str:
    """The task type from the folder name (`pick_and_place_simple-Pencil-None-Dresser-330`), else traj_data."""
    name = game_dir.parent.name.split("-", 1)[0]
    if name in TASK_TYPES_BY_NAME:
        return name
    try:
        return str(json.loads((game_dir / "traj_data.json").read_text())["task_type"])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise _Broken(f"its traj_data.json is broken ({type(err).__name__}: {err}) and the folder name does not "
                      "give the task type") from None


def broken_files_message(broken: list[tuple[Path, str]], root: str) -> str:
    """One message naming the first few broken game files under a folder, what is wrong with each, and the fix."""
    named = "; ".join(f"{path} ({problem})" for path, problem in broken[:MAX_NAMED])
    more = f" and {len(broken) - MAX_NAMED} more" if len(broken) > MAX_NAMED else ""
    return (f"{len(broken)} broken ALFWorld game file(s) under {root}: {named}{more}. For each: {FIX}; the other "
            "games of the split are fine")


@cache
def scan_folder(root: str, split: str, skip_broken: bool = False) -> tuple[GameRecord, ...]:
    """Every solvable game under `root` (sorted by path), as `AlfredTWEnv.collect_game_files` selects them.

    A game file that is truncated or not JSON stops the scan with an error naming it (all of them, up to a few),
    or, with `skip_broken`, is left out with a warning naming it; the other games stay usable either way.
    """
    records = []
    broken: list[tuple[Path, str]] = []
    for traj in sorted(Path(root).rglob("traj_data.json")):
        game_dir = traj.parent
        if any(mark in str(game_dir) for mark in SKIPPED_FOLDER_MARKS):
            continue
        game_file = game_dir / "game.tw-pddl"
        try:
            if not game_file.exists() or not _solvable(game_file):
                continue
            task_type = _folder_task_type(game_dir)
        except _Broken as err:
            broken.append((game_file, err.problem))
            continue
        if task_type not in TASK_TYPES_BY_NAME:
            continue
        records.append(GameRecord(
            game_id=str(game_dir.relative_to(root)), split=split, task_type=task_type, path=str(game_file)
        ))
    if broken and not skip_broken:
        raise GameFileError(broken_files_message(broken, root))
    for path, problem in broken:
        message = f"skipping broken ALFWorld game file {path}: {problem} ({SKIP_OPTION})"
        log.warning(message)
        warnings.warn(message, stacklevel=2)
    return tuple(records)


def _real_data_root() -> Path:
    value = os.environ.get("ALFWORLD_DATA")
    if not value:
        raise ConfigError(f"ALFWORLD_DATA is not set; {REAL_DATA_HINT}; {LAYOUT_HINT}")
    root = Path(value).expanduser() / "json_2.1.1"
    if not root.is_dir():
        raise ConfigError(f"{root} does not exist (ALFWORLD_DATA={value}); {REAL_DATA_HINT}; {LAYOUT_HINT}")
    return root


def folder_for_split(data_source: str, split: str) -> Path:
    """The folder holding a split's games: `<root>/<split>` when the root has split folders, else the root."""
    root = _real_data_root() if data_source == "real" else Path(data_source).expanduser()
    if not root.is_dir():
        raise ConfigError(f"ALFWorld data_source {data_source!r} is not a folder; use bundled, real or a folder of "
                          "games in the real format (traj_data.json + game.tw-pddl per game)")
    if (root / "json_2.1.1").is_dir():
        root = root / "json_2.1.1"
    if any((root / s).is_dir() for s in ALFWORLD_SPLITS):
        if not (root / split).is_dir():
            raise ConfigError(f"{root} has no {split}/ folder (found: "
                              f"{', '.join(s for s in ALFWORLD_SPLITS if (root / s).is_dir())})")
        return root / split
    return root


# -- choosing a game for a task --------------------------------------------------------------------------------------
def parse_task_types(task_types: Sequence[int | str] | None) -> tuple[str, ...]:
    """Task types by ALFWorld number (1-6), full name or short name; None means all six."""
    if not task_types:
        return tuple(t.name for t in TASK_TYPES)
    aliases = {str(t.id): t.name for t in TASK_TYPES}
    aliases.update({t.short.lower(): t.name for t in TASK_TYPES})
    aliases.update({t.name: t.name for t in TASK_TYPES})
    out = []
    for value in task_types:
        name = aliases.get(str(value).strip().lower())
        if name is None:
            raise ConfigError(f"unknown ALFWorld task type {value!r}; use 1-6, a name like pick_and_place_simple or "
                              "a short name (Pick, Look, Clean, Heat, Cool, Pick2)")
        out.append(name)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class GameSet:
    """Resolves agentforge tasks to ALFWorld games of one data source."""

    data_source: str = "bundled"
    task_types: tuple[str, ...] = tuple(t.name for t in TASK_TYPES)
    eval_split: str = "valid_seen"
    test_split: str = "valid_unseen"
    skip_broken_games: bool = False

    def __post_init__(self) -> None:
        for name, value in (("eval_split", self.eval_split), ("test_split", self.test_split)):
            if value not in ALFWORLD_SPLITS:
                raise ConfigError(f"alfworld {name} must be one of {', '.join(ALFWORLD_SPLITS)}, got {value!r}")

    def alfworld_split(self, split: str) -> str:
        """agentforge split (train/eval/test) -> ALFWorld split; ALFWorld split names pass through."""
        if split in ALFWORLD_SPLITS:
            return split
        mapping = {"train": "train", "eval": self.eval_split, "test": self.test_split}
        if split not in mapping:
            raise ConfigError(f"unknown split {split!r} for alfworld; valid: train, eval, test or "
                              f"{', '.join(ALFWORLD_SPLITS)}")
        return mapping[split]

    def games(self, split: str) -> tuple[GameRecord, ...]:
        alf_split = self.alfworld_split(split)
        if self.data_source == "bundled":
            records = load_bundle(str(bundle_path(alf_split)), alf_split)
        else:
            folder = folder_for_split(self.data_source, alf_split)
            records = scan_folder(str(folder), alf_split, bool(self.skip_broken_games))
            if not records:
                raise ConfigError(f"no solvable ALFWorld games under {folder} (split {alf_split!r} of data_source "
                                  f"{self.data_source!r}): {LAYOUT_HINT}")
        wanted = set(self.task_types)
        selected = tuple(r for r in records if r.task_type in wanted)
        if not selected:
            raise ConfigError(f"no ALFWorld games of types {sorted(wanted)} in split {alf_split!r} of data_source "
                              f"{self.data_source!r} ({len(records)} games of other types); widen env.task_types")
        return selected

    def game_for(self, task: Task, skip: Collection[str] = ()) -> GameRecord:
        """The game a task plays: (seed - split base) mod the split's size, moving on to the next game while the
        game id is in `skip` (games found broken when loaded), so the choice stays the same in every process."""
        games = self.games(task.split)
        base = SPLIT_SEED_BASE.get(task.split, 0)
        start = (task.seed - base) % len(games)
        for offset in range(len(games)):
            game = games[(start + offset) % len(games)]
            if game.game_id not in skip:
                return game
        raise GameFileError(f"every game of split {self.alfworld_split(task.split)!r} of data_source "
                            f"{self.data_source!r} failed to load; {FIX}")


def game_set(options: dict[str, Any]) -> GameSet:
    """A GameSet from env options (the `env` config group minus `name`; other keys are ignored)."""
    return GameSet(
        data_source=str(options.get("data_source", "bundled")),
        task_types=parse_task_types(options.get("task_types")),
        eval_split=str(options.get("eval_split", "valid_seen")),
        test_split=str(options.get("test_split", "valid_unseen")),
        skip_broken_games=bool(options.get("skip_broken_games", False)),
    )


def task_type_of(task: Task, env_options: dict[str, Any]) -> str:
    """The ALFWorld task type (full name) of the game a task plays."""
    return game_set(env_options).game_for(task).task_type
