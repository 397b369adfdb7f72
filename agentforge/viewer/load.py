"""Find and read the trajectories of a run dir, whatever command wrote it, into sections of groups.

A train run keeps one file per iteration (`trajectories/iter_NNNNN.jsonl.gz`, with advantages and forced-token
ranges); runs from before that kept only a few trajectories per iteration in `samples.jsonl`, which is shown with a
note. `agentforge eval` writes `trajectories.jsonl` (the policy row) and `trajectories_<condition>.jsonl`
(interventions); `agentforge rollout` writes `trajectories.jsonl`. A record without a `group` index is grouped by its
task: the G rollouts of one task are what a group-relative algorithm compared.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentforge.errors import AgentforgeError
from agentforge.tracking.tracker import read_metrics
from agentforge.tracking.trajectories import TRAJECTORY_DIR, iteration_files, read_records

RUN_MARKERS = ("config.yaml", "metrics.jsonl", "eval.json", "summary.json", "samples.jsonl")
CONDITION_FILE = re.compile(r"^trajectories_(.+)\.jsonl(\.gz)?$")


class ViewerError(AgentforgeError):
    """A path the viewer cannot show; the message names the problem and what to pass instead."""


@dataclass
class GroupView:
    """The rollouts of one task in one section."""

    index: int
    task: dict[str, Any]
    trajectories: list[dict[str, Any]]

    @property
    def label(self) -> str:
        task = self.task
        extra = f" id={task['task_id']}" if task.get("task_id") else ""
        return f"{task.get('env', '?')}[{task.get('split', '?')}] seed={task.get('seed', '?')}{extra}"

    @property
    def successes(self) -> int:
        return sum(bool(t.get("won")) for t in self.trajectories)

    @property
    def mean_return(self) -> float:
        returns = [float(t.get("return", 0.0)) for t in self.trajectories]
        return sum(returns) / len(returns) if returns else 0.0


@dataclass
class Section:
    """One batch of trajectories: a training iteration, an eval row or condition, a rollout."""

    key: str
    label: str
    kind: str
    groups: list[GroupView]
    iteration: int | None = None
    note: str = ""

    @property
    def trajectories(self) -> list[dict[str, Any]]:
        return [t for g in self.groups for t in g.trajectories]

    @property
    def successes(self) -> int:
        return sum(g.successes for g in self.groups)


@dataclass
class RunView:
    """Everything the page shows about one run."""

    path: Path
    kind: str
    env: str | None
    sections: list[Section]
    config: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def algorithm(self) -> dict[str, Any]:
        return dict(self.config.get("algorithm") or {})

    @property
    def model(self) -> str | None:
        model = self.config.get("model") or {}
        return model.get("path") or model.get("name")

    @property
    def trajectory_count(self) -> int:
        return sum(len(s.trajectories) for s in self.sections)


# ---- grouping ------------------------------------------------------------------------------------------------------
def group_records(records: Iterable[dict[str, Any]]) -> list[GroupView]:
    """Records into groups: by their `group` index when the writer recorded it, else by task, in first-seen order;
    rollouts sorted by their index."""
    groups: dict[Any, GroupView] = {}
    for record in records:
        task = dict(record.get("task") or {})
        key = record["group"] if "group" in record else json.dumps(task, sort_keys=True)
        if key not in groups:
            groups[key] = GroupView(len(groups), task, [])
        groups[key].trajectories.append(record)
    for group in groups.values():
        group.trajectories.sort(key=lambda t: int(t.get("rollout_index", 0)))
    return list(groups.values())


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        return read_records(path)
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ViewerError(f"{path} is not a readable trajectories file ({type(error).__name__}: {error}); it may be "
                          "truncated by a stopped run: delete it, or pass --iterations to leave it out") from error


# ---- run dirs ------------------------------------------------------------------------------------------------------
def parse_iterations(spec: str | None) -> set[int] | None:
    """`1,5,10-12` -> {1, 5, 10, 11, 12}; None or empty -> None (all)."""
    if not spec:
        return None
    chosen: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                low, high = (int(x) for x in part.split("-", 1))
                chosen.update(range(low, high + 1))
            elif part:
                chosen.add(int(part))
        except ValueError:
            raise ViewerError(
                f"--iterations {spec!r}: {part!r} is not a number or a range; write e.g. 1,5,10-12") from None
    return chosen


def load_run(path: Path, iterations: set[int] | None = None, last: int | None = None) -> RunView:
    """The run at `path` (a run dir, or one trajectories file) as sections; `iterations`/`last` pick training
    iterations (a long run's page stays small)."""
    path = Path(path)
    if not path.exists():
        raise ViewerError(f"{path} does not exist; give a run dir (the `run dir:` a train, eval or rollout printed, "
                          "e.g. runs/train/<time>) or a trajectories .jsonl / .jsonl.gz file")
    if path.is_file():
        return _load_file(path)
    if path.name == TRAJECTORY_DIR and iteration_files(path.parent):  # the run's trajectories/ folder: its run
        path = path.parent
    config = _read_config(path)
    kind = str(config.get("command") or _guess_kind(path))
    env = (config.get("env") or {}).get("name")
    view = RunView(path, kind, env, [], config, read_metrics(path / "metrics.jsonl"))
    view.sections += _training_sections(path, view, iterations, last)
    view.sections += _trajectory_file_sections(path)
    if not view.sections:
        raise _no_trajectories(path)
    if view.env is None:
        view.env = next((g.task.get("env") for s in view.sections for g in s.groups if g.task.get("env")), None)
    return view


def _training_sections(path: Path, view: RunView, iterations: set[int] | None, last: int | None) -> list[Section]:
    files = iteration_files(path)
    chosen = sorted(i for i in files if iterations is None or i in iterations)
    if last:
        chosen = chosen[-last:]
    if files:
        if not chosen:
            raise ViewerError(f"{path} has trajectories for iterations {_ranges(files)}, none of those asked for; "
                              "pick some of them with --iterations or --last")
        return [Section(f"iter-{i}", f"iteration {i}", "train", group_records(_read(files[i])), iteration=i)
                for i in chosen]
    samples = path / "samples.jsonl"
    if not samples.exists():
        return []
    by_iteration: dict[int, list[dict[str, Any]]] = {}
    for record in _read(samples):
        by_iteration.setdefault(int(record.get("iteration", 0)), []).append(record)
    chosen = sorted(i for i in by_iteration if iterations is None or i in iterations)
    chosen = chosen[-last:] if last else chosen
    view.notes.append("This run predates per-iteration trajectory files: shown are the few trajectories per iteration "
                      "of samples.jsonl (trainer.log_samples), without advantages or forced-token marks. Runs from "
                      "now on write every trajectory to trajectories/iter_NNNNN.jsonl.gz.")
    return [Section(f"iter-{i}", f"iteration {i} (samples)", "samples", group_records(by_iteration[i]), iteration=i)
            for i in chosen]


def _trajectory_file_sections(path: Path) -> list[Section]:
    """`trajectories.jsonl` (eval's policy row, a rollout) and eval's `trajectories_<condition>.jsonl`."""
    sections: list[Section] = []
    eval_report = _read_json(path / "eval.json")
    for candidate in ("trajectories.jsonl", "trajectories.jsonl.gz"):
        file = path / candidate
        if file.exists():
            if eval_report:
                rows = eval_report.get("rows") or [{}]
                label, kind = f"eval: {rows[0].get('name', 'policy')}", "eval"
            else:
                label, kind = "rollout", "rollout"
            sections.append(Section(kind, label, kind, group_records(_read(file))))
            break
    for file in sorted(path.iterdir()):
        match = CONDITION_FILE.match(file.name)
        if match:
            condition = match.group(1)
            sections.append(Section(f"eval-{condition}", f"eval: {condition.replace('_', ' ')} condition", "eval",
                                    group_records(_read(file))))
    return sections


def _load_file(path: Path) -> RunView:
    if not path.name.endswith((".jsonl", ".jsonl.gz")):
        raise ViewerError(f"{path} is a file but not a trajectories .jsonl / .jsonl.gz file; give a run dir instead")
    records = _read(path)
    if not records:
        raise ViewerError(f"{path} holds no trajectories (it is empty)")
    iteration = records[0].get("iteration")
    section = Section("file", path.name if iteration is None else f"iteration {iteration}", "file",
                      group_records(records), iteration=iteration)
    env = next((g.task.get("env") for g in section.groups if g.task.get("env")), None)
    config = _read_config(path.parent.parent if path.parent.name == "trajectories" else path.parent)
    return RunView(path, "file", env, [section], config)


def _no_trajectories(path: Path) -> ViewerError:
    if not any((path / marker).exists() for marker in RUN_MARKERS):
        jobs = sorted(p.name for p in path.iterdir() if p.is_dir() and any((p / m).exists() for m in RUN_MARKERS))
        if jobs:
            return ViewerError(f"{path} is a folder of runs (a --multirun sweep?), not one run; view one of its jobs, "
                               f"e.g. `agentforge view {path / jobs[0]}` (jobs: {', '.join(jobs[:10])})")
        return ViewerError(f"{path} is not an agentforge run dir: it has none of {', '.join(RUN_MARKERS)}; give the "
                           "folder a train, eval or rollout printed as `run dir:` (e.g. runs/train/<time>)")
    return ViewerError(f"{path} is a run dir without trajectories: a train run writes trajectories/iter_NNNNN.jsonl.gz "
                       "when trainer.save_trajectories=true (the default; runs before it kept samples.jsonl), "
                       "`agentforge eval` and `agentforge rollout` write trajectories.jsonl when they finish; "
                       "rerun it, or wait until it has finished an iteration")


def _read_config(path: Path) -> dict[str, Any]:
    file = path / "config.yaml"
    if not file.exists():
        return {}
    try:
        config = yaml.safe_load(file.read_text())
    except yaml.YAMLError:
        return {}  # the page still shows the trajectories; only the run's description is lost
    return config if isinstance(config, dict) else {}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}




def _guess_kind(path: Path) -> str:
    if (path / "eval.json").exists():
        return "eval"
    if iteration_files(path) or (path / "metrics.jsonl").exists():
        return "train"
    return "rollout"


def _ranges(numbers: Iterable[int]) -> str:
    values = sorted(numbers)
    parts: list[str] = []
    start = previous = values[0]
    for value in values[1:] + [None]:  # type: ignore[list-item]
        if value is None or value != previous + 1:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
            if value is not None:
                start = value
        if value is not None:
            previous = value
    return ",".join(parts)
