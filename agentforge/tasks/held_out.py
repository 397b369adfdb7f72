"""Held-out means held out: the eval and test splits are sets of distinct task contents that no training stream yields.

A task is its content (`agentforge.envs.task_keys`), not its seed. So:

- a held-out split is the first N **distinct** contents of that split's seeds (repeats skipped and counted: requested
  vs distinct is shown), `test` first (claims only), then `eval` (choosing settings), which also skips test's
  contents, so the two are disjoint and the test set does not move when the eval set grows;
- the run reserves `held_out.reserve` distinct tasks of each split (or more, when an eval asks for more), and every
  training stream (the RL task sampler, its curriculum levels, the SFT warm start's expert tasks, RFT's) skips a drawn
  task whose content is reserved, and counts it (`TrainingFilter`);
- every task a training stream keeps is recorded (a digest of its key), so a run's summary reports the overlap it
  measured between what it trained on and what it was evaluated on, rather than one assumed from seed ranges.

Only keys travel here (a callable): this module knows nothing of envs; `builders.held_out_for` wires the env's keyer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentforge.errors import ConfigError
from agentforge.tasks.sampling import SPLIT_SEED_BASE
from agentforge.types import Task

KeyFn = Callable[[Task], str]
DigestFn = Callable[[str], str]
HELD_OUT_SPLITS = ("test", "eval")  # built in this order: eval skips test's contents
SCAN_FACTOR, SCAN_EXTRA = 4, 256  # seeds scanned for N distinct tasks: at most 4 N + 256 (a small split runs out)
SELECT_FACTOR = 8  # a selection (held_out.min_depth) may keep one content in a few: scan that much further
MAX_CONSECUTIVE_SKIPS = 20_000  # a training stream that draws only held-out content this long cannot go on


@dataclass
class HeldOutSet:
    """One held-out split: its distinct tasks in seed order, their key digests, and how they were found."""

    split: str
    tasks: list[Task]
    digests: list[str]
    requested: int
    scanned: int
    repeats: int = 0  # seeds whose content repeated one already in the set
    in_other_split: int = 0  # seeds whose content belongs to an earlier-built held-out split (eval: test's)
    not_selected: int = 0  # distinct contents the selection left out (held_out.min_depth / max_depth)

    def first(self, count: int) -> list[Task]:
        return self.tasks[:count]

    def describe(self) -> str:
        short = "" if len(self.tasks) >= self.requested else \
            f" (the split ran out of new content after {self.scanned} seeds)"
        return (f"{self.split}: {len(self.tasks)} distinct of {self.requested} requested{short}; "
                f"{self.repeats} repeated seeds skipped" +
                (f", {self.in_other_split} held out in test" if self.in_other_split else "") +
                (f", {self.not_selected} outside the selection" if self.not_selected else ""))

    def to_json(self) -> dict[str, Any]:
        return {"requested": self.requested, "distinct": len(self.tasks), "seeds_scanned": self.scanned,
                "repeats_skipped": self.repeats, "in_other_split_skipped": self.in_other_split,
                "not_selected": self.not_selected,
                "first_seed": self.tasks[0].seed if self.tasks else None,
                "last_seed": self.tasks[-1].seed if self.tasks else None}


def held_out_set(env: str, split: str, count: int, key: KeyFn, digest: DigestFn, seed_offset: int = 0,
                 exclude: frozenset[str] = frozenset(), select: Callable[[Task], bool] | None = None) -> HeldOutSet:
    """The first `count` distinct contents among `env`'s seeds of `split` from `seed_offset`, skipping `exclude`
    and, with `select`, the contents it refuses (e.g. rooms whose solution is too short: `held_out.min_depth`)."""
    if split not in SPLIT_SEED_BASE or split == "train":
        raise ConfigError(f"held-out split {split!r}; valid: eval, test")
    seen: set[str] = set()
    out = HeldOutSet(split, [], [], count, 0)
    base = SPLIT_SEED_BASE[split] + seed_offset
    limit = (SCAN_FACTOR * count + SCAN_EXTRA) * (SELECT_FACTOR if select is not None else 1)
    while len(out.tasks) < count and out.scanned < limit:
        task = Task(env=env, seed=base + out.scanned, split=split)
        out.scanned += 1
        fingerprint = digest(key(task))
        if fingerprint in seen:
            out.repeats += 1
        elif fingerprint in exclude:
            out.in_other_split += 1
        elif select is not None and not select(task):
            seen.add(fingerprint)
            out.not_selected += 1
        else:
            seen.add(fingerprint)
            out.tasks.append(task)
            out.digests.append(fingerprint)
    return out


@dataclass
class HeldOut:
    """A run's held-out splits (per member env for `env=mix`): the reserved contents and how each split was built."""

    sets: dict[str, dict[str, HeldOutSet]]  # split -> env -> set
    keyed: bool = True
    note: str | None = None

    def tasks(self, split: str, count: int) -> list[Task]:
        """`count` held-out tasks of `split` per env (each member of a mix gets its own), the first of the reserve."""
        if split not in self.sets:
            raise ConfigError(f"no held-out {split!r} split was reserved; valid: {', '.join(self.sets)}")
        empty = [env for env, found in self.sets[split].items() if not found.tasks and count > 0]
        if empty:
            raise ConfigError(f"env {empty[0]}: its {split} split holds no content that is not already held out in "
                              f"another split ({self.sets[split][empty[0]].describe()}); its eval and test data are "
                              "the same tasks: give them different data, or lower held_out.reserve")
        return [task for found in self.sets[split].values() for task in found.first(count)]

    def reserved(self) -> frozenset[str]:
        return frozenset(d for by_env in self.sets.values() for found in by_env.values() for d in found.digests)

    def digests(self, tasks: Iterable[Task]) -> dict[str, str]:
        """Task.key -> digest for held-out tasks of this reserve."""
        index = {t.key: d for by_env in self.sets.values() for found in by_env.values()
                 for t, d in zip(found.tasks, found.digests, strict=True)}
        return {t.key: index[t.key] for t in tasks if t.key in index}

    def describe(self) -> list[str]:
        lines = [f"held-out {found.describe()}" + (f" [{env}]" if len(by_env) > 1 else "")
                 for by_env in self.sets.values() for env, found in by_env.items()]
        if self.note:
            lines.append(self.note)
        return lines

    def to_json(self) -> dict[str, Any]:
        return {"keyed_by_content": self.keyed, "note": self.note,
                "splits": {split: {env: found.to_json() for env, found in by_env.items()}
                           for split, by_env in self.sets.items()}}


def build_held_out(envs: list[str], sizes: dict[str, int], key: KeyFn, digest: DigestFn, keyed: bool = True,
                   note: str | None = None, seed_offsets: dict[str, int] | None = None,
                   select: Callable[[Task], bool] | None = None) -> HeldOut:
    """Test first, then eval skipping test's contents: disjoint splits, and a test set independent of eval's size."""
    sets: dict[str, dict[str, HeldOutSet]] = {}
    taken: set[str] = set()
    for split in HELD_OUT_SPLITS:
        if split not in sizes:
            continue
        sets[split] = {}
        for env in envs:
            found = held_out_set(env, split, int(sizes[split]), key, digest, (seed_offsets or {}).get(split, 0),
                                 frozenset(taken), select)
            sets[split][env] = found
        taken.update(d for found in sets[split].values() for d in found.digests)
    return HeldOut(sets, keyed, note)


@dataclass
class TrainingFilter:
    """Keeps reserved held-out content out of the training streams that share it (RL sampler, curriculum, SFT, RFT):
    `admit(task)` is False for a reserved content (counted in `skipped`); every admitted task's digest is recorded in
    `trained`, which a checkpoint keeps and the run's summary measures the overlap with."""

    key: KeyFn
    digest: DigestFn
    reserved: frozenset[str]
    skipped: int = 0
    trained: set[str] = field(default_factory=set)
    _run: int = 0  # consecutive skips

    def admit(self, task: Task) -> bool:
        fingerprint = self.digest(self.key(task))
        if fingerprint in self.reserved:
            self.skipped += 1
            self._run += 1
            if self._run >= MAX_CONSECUTIVE_SKIPS:
                raise ConfigError(f"{task.env}: {self._run} training tasks in a row were held-out tasks (the last: "
                                  f"{task.describe()}): the env has too few distinct tasks for held-out sets of "
                                  f"{len(self.reserved)} contents; lower held_out.reserve (e.g. to the eval and test "
                                  "sizes the run uses) or use settings with more tasks (a bigger room, more steps)")
            return False
        self._run = 0
        self.trained.add(fingerprint)
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped, "trained": sorted(self.trained)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.skipped = int(state.get("skipped", 0))
        self.trained = set(state.get("trained", []))


def overlap(trained: set[str], held_out: dict[str, str]) -> int:
    """Held-out tasks (key -> digest) whose content a training stream yielded: measured, and 0 when it works."""
    return sum(1 for d in held_out.values() if d in trained)


@dataclass
class TrainingStreams:
    """What every training stream of a run draws with: the run seed's stretch of the train split (`stream`) and the
    held-out filter (None: nothing reserved, e.g. an API caller's bare sampler)."""

    stream: int = 0
    filter: TrainingFilter | None = None

    @property
    def admit(self) -> Callable[[Task], bool] | None:
        return self.filter.admit if self.filter is not None else None


RECORD_FILE = "held_out.json"  # in a run dir: the held-out sets, what training skipped, the digests it trained on


def run_record(held_out: HeldOut, streams: TrainingStreams, evaluated: dict[str, list[Task]],
               earlier: set[str] | None = None) -> dict[str, Any]:
    """What a run says about its held-out sets: how each was built, what the training streams skipped, and the
    overlap measured between the tasks it trained on (plus `earlier`: a warm start's, from the record of the run
    that made the model it started from; None: unknown) and each set it evaluated. `trained` holds the digests
    and `reserved` the held-out sets' digests (`held_out.json` keeps them; summaries drop them)."""
    trained = set(streams.filter.trained) if streams.filter is not None else set()
    trained |= earlier or set()
    record = held_out.to_json()
    record["training"] = {"stream": streams.stream, "distinct_tasks": len(trained),
                          "held_out_skipped": streams.filter.skipped if streams.filter is not None else 0,
                          "warm_start_tasks_known": earlier is not None}
    record["overlap"] = {split: {"tasks": len(tasks), "trained_on": overlap(trained, held_out.digests(tasks))}
                         for split, tasks in evaluated.items() if tasks}
    record["trained"] = sorted(trained)
    record["reserved"] = {split: {env: found.digests for env, found in by_env.items()}
                          for split, by_env in held_out.sets.items()}
    return record


def write_record(folders: Iterable[Any], record: dict[str, Any]) -> None:
    """`held_out.json` in each folder: the run dir, and a warm start's model folder, so that a run initialised from
    it (`model.init_from`) knows what its model trained on."""
    text = json.dumps(record, indent=1)
    for folder in folders:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / RECORD_FILE).write_text(text)


def earlier_training(init_from: str | None) -> set[str] | None:
    """The tasks a model given as `model.init_from` was trained on (the record its `agentforge sft`/`rft` run wrote
    beside it); None where that is unknown, an empty set when there is no init_from."""
    if not init_from:
        return set()
    for path in (Path(str(init_from)) / RECORD_FILE, Path(str(init_from)).parent / RECORD_FILE):
        if path.is_file():
            return set(json.loads(path.read_text()).get("trained", []))
    return None


def summary_record(record: dict[str, Any]) -> dict[str, Any]:
    """The record without its digests (what summary.json shows)."""
    return {k: v for k, v in record.items() if k not in ("trained", "reserved")}
