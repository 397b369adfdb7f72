"""Every training iteration's whole trajectories, one gzipped JSONL file each, for `agentforge view` and wandb tables.

Why a file per iteration: samples.jsonl keeps only a few trajectories as text, which cannot show what a group
compared, nor the advantages the learner trained on. A record is `Trajectory.to_json` plus where it came from
(`iteration`, `group`) and, per turn, its `advantage` and the tokens a decoding intervention forced. Token ids and
log-probs are left out unless asked for (`trainer.trajectory_tokens`): they are most of the size and the text
already shows what was said. Forced tokens are then kept as ranges: token positions (`forced.tokens`) and the
characters of the response text they decode to (`forced.chars`), so a viewer can mark them without a tokenizer.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from agentforge.types import Group, LossRole

TRAJECTORY_DIR = "trajectories"
FILE_PATTERN = re.compile(r"^iter_(\d+)\.jsonl\.gz$")


class Decoder(Protocol):
    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


def trajectory_file(run_dir: Path, iteration: int) -> Path:
    """Where iteration `iteration`'s trajectories go: `<run dir>/trajectories/iter_00003.jsonl.gz`."""
    return run_dir / TRAJECTORY_DIR / f"iter_{iteration:05d}.jsonl.gz"


def iteration_files(run_dir: Path) -> dict[int, Path]:
    """The iteration files of a run dir, by iteration (empty when the run wrote none)."""
    folder = run_dir / TRAJECTORY_DIR
    found: dict[int, Path] = {}
    if folder.is_dir():
        for path in folder.iterdir():
            match = FILE_PATTERN.match(path.name)
            if match:
                found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def token_runs(mask: Sequence[bool]) -> list[list[int]]:
    """[start, end) runs of True in a forced-token mask: `[F, T, T, F, T]` -> `[[1, 3], [4, 5]]`."""
    runs: list[list[int]] = []
    for i, forced in enumerate(mask):
        if forced and runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        elif forced:
            runs.append([i, i + 1])
    return runs


def char_runs(token_ids: Sequence[int], runs: list[list[int]], text: str, decoder: Decoder | None) -> list[list[int]]:
    """The characters of `text` that the forced token runs decode to (prefix decoding: a run [a, b) covers
    len(decode(ids[:a])) .. len(decode(ids[:b]))). Empty without a decoder or where a run decodes to nothing (a
    special token such as the end-of-turn marker)."""
    if decoder is None or not runs:
        return []
    cache: dict[int, int] = {}

    def offset(i: int) -> int:
        if i not in cache:
            cache[i] = min(len(decoder.decode(list(token_ids[:i]), skip_special_tokens=True)), len(text))
        return cache[i]

    return [[offset(a), offset(b)] for a, b in runs if offset(b) > offset(a)]


def forced_record(token_ids: Sequence[int], mask: Sequence[bool], text: str, decoder: Decoder | None) -> dict:
    runs = token_runs(mask)
    return {"tokens": runs, "chars": char_runs(token_ids, runs, text, decoder)} if runs else {}


def trajectory_records(groups: Sequence[Group], advantages: Iterable[float] | None = None,
                       span_advantages: Iterable[float] | None = None, decoder: Decoder | None = None,
                       with_tokens: bool = False) -> list[dict[str, Any]]:
    """One record per trajectory, in group order, with each turn's advantage (flat `iter_turns` order, as
    `Algorithm.advantages` returns them) and each trained span's (flat `iter_trained_spans` order)."""
    turn_adv = iter([float(a) for a in advantages]) if advantages is not None else None
    span_adv = iter([float(a) for a in span_advantages]) if span_advantages is not None else None
    records: list[dict[str, Any]] = []
    for g, group in enumerate(groups):
        for trajectory in group.trajectories:
            record = {"group": g, **trajectory.to_json(with_tokens)}
            for turn, out in zip(trajectory.turns, record["turns"], strict=True):
                out["response_tokens"] = len(turn.response_ids)
                if turn_adv is not None:
                    out["advantage"] = next(turn_adv, None)
                forced = forced_record(turn.response_ids, turn.forced_mask, turn.response_text, decoder)
                if forced:
                    out["forced"] = forced
            for span, out in zip(trajectory.spans, record.get("spans", []), strict=True):
                out["response_tokens"] = len(span.response_ids)
                if span_adv is not None and LossRole(span.role).trained and \
                        not LossRole(span.role).takes_turn_advantage:  # a summary's is its turn's
                    out["advantage"] = next(span_adv, None)
                forced = forced_record(span.response_ids, span.forced_mask, span.text, decoder)
                if forced:
                    out["forced"] = forced
            records.append(record)
    return records


def write_records(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    """Write gzipped JSONL atomically (a reader never sees half a file; a resumed run rewrites it whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with gzip.open(partial, "wt", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, default=_jsonable) + "\n")
    partial.replace(path)
    return path


def read_records(path: Path) -> list[dict[str, Any]]:
    """Records of a `.jsonl` or `.jsonl.gz` file, skipping blank lines."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _jsonable(value: Any) -> Any:
    """numpy scalars and other oddities in `info`/`meta`: as plain values or text, never a failed write."""
    for attribute in ("tolist", "item"):
        if hasattr(value, attribute):
            return getattr(value, attribute)()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


# ---- wandb ---------------------------------------------------------------------------------------------------------
TABLE_COLUMNS = ["iteration", "group", "task", "rollout", "won", "return", "turn", "observation", "response", "action",
                 "valid", "reward", "advantage", "forced_tokens"]


def table_rows(iteration: int, records: Iterable[dict[str, Any]]) -> list[list[Any]]:
    """One row per turn (wandb tables are flat): what a person filters and sorts on in the wandb UI."""
    rows = []
    for record in records:
        task = record.get("task", {})
        label = f"{task.get('env', '?')}[{task.get('split', '?')}] seed={task.get('seed', '?')}"
        for number, turn in enumerate(record.get("turns", []), start=1):
            forced = sum(b - a for a, b in turn.get("forced", {}).get("tokens", []))
            rows.append([iteration, record.get("group"), label, record.get("rollout_index"), bool(record.get("won")),
                         record.get("return"), number, turn.get("observation", ""), turn.get("response_text", ""),
                         turn.get("action") or "", bool(turn.get("valid")), turn.get("reward"),
                         turn.get("advantage"), forced])
    return rows


def write_trajectories(path: Path, groups: list[Group], with_tokens: bool) -> None:
    with path.open("w") as f:
        for group in groups:
            for trajectory in group.trajectories:
                f.write(json.dumps(trajectory.to_json(with_tokens)) + "\n")
