"""A finished run's report: the training curves, the eval table, the paired verdicts and `summary.json`.

Why here: what a run says at its end reads only the run's eval history, so it stands apart from the loop that
made it (and can be read, and changed, without the loop).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentforge.evaluation.summary import eval_row, floor_row, run_verdicts, summary_table, verdict, view_hint
from agentforge.tasks.held_out import summary_record
from agentforge.tracking.plotting import plot_training_curves
from agentforge.tracking.progress import console
from agentforge.training.plain_verdict import plain_verdict


@dataclass
class TestEvals:
    """The run's evals of the test split (the claim: at the start and at the end), keyed like the eval split's
    ("base", "0", the last iteration), with the random floor on the same tasks."""

    history: dict[str, dict[str, float]]
    outcomes: dict[str, dict[str, list[bool]]]
    floor: dict[str, list[bool]] | None = None


def split_report(split: str, history: dict[str, dict[str, float]], outcomes: dict[str, dict[str, list[bool]]],
                 floor: dict[str, list[bool]] | None) -> dict[str, Any]:
    """One split's rows (the model as given, each eval, the random floor), its paired verdicts and sentences."""
    def metrics(values: dict[str, float]) -> dict[str, float]:  # the row reads eval/ keys
        return {k.replace(f"{split}/", "eval/", 1): v for k, v in values.items()}

    evals = sorted(((k, v) for k, v in history.items() if k != "base"), key=lambda kv: int(kv[0]))
    out: dict[str, Any] = {}
    rows = []
    if "base" in history:
        out["base"] = history["base"]
        rows.append(eval_row("model as given", metrics(history["base"])))
    if evals:
        out["before"] = {"iteration": int(evals[0][0]), **evals[0][1]}
        out["after"] = {"iteration": int(evals[-1][0]), **evals[-1][1]}
        warm = " (after the warm start)" if "base" in history and int(evals[0][0]) == 0 else ""
        rows += [eval_row(f"iteration {k}{warm if k == '0' else ''}", metrics(v)) for k, v in evals]
    if floor and rows:
        rows.append(floor_row(floor))
        out["floor_outcomes"] = floor  # per task, the random floor's episodes: what scripts pair against
    if not rows:
        return out
    out["evals"] = rows
    named = [(row["name"], outcomes[key]) for row, key in zip(
        rows, (["base"] if "base" in history else []) + [k for k, _ in evals], strict=False) if key in outcomes]
    records = run_verdicts(named, floor)
    lines = [r["text"] for r in records]
    model_rows = [r for r in rows if r.get("valid_format") is not None]
    if len(model_rows) > 1:
        lines.append(verdict(model_rows[0], model_rows[-1]))
    if records:
        out["verdicts"] = records
    if lines:
        out["verdict"] = lines
    return out


def final_report(run_dir: Path, title: str, history: dict[str, dict[str, float]],
                 eval_outcomes: dict[str, dict[str, list[bool]]], floor: dict[str, list[bool]] | None,
                 untrained: list[int], untrained_line: str | None, test: TestEvals | None = None,
                 held_out: dict[str, Any] | None = None, method: str = "RL", warm_started: bool = False,
                 closing_hint: str | None = None) -> dict[str, Any]:
    """Plot, print and write the run's summary: each eval as a row (the model as given, each iteration, the random
    floor), the verdicts between them on the same tasks, for the eval split (choosing) and, when the run has one,
    the test split (the claim); the held-out record (sizes, skips, overlap measured); the iterations that trained
    nothing; then three plain lines on the claim split (shipped, warm start, RL) and the recipe's `closing_hint`."""
    floor_rate = floor_row(floor)["success"] if floor else None
    plot = plot_training_curves(run_dir / "metrics.jsonl", run_dir / "training_curves.png", title, floor=floor_rate)
    summary: dict[str, Any] = {"run_dir": str(run_dir), "plot": str(plot)}
    found = split_report("eval", history, eval_outcomes, floor)
    summary.update(found)
    if "evals" in found:
        console.print(summary_table(found["evals"], "held-out eval (validation: for choosing settings)"))
        for line in found.get("verdict", []):
            console.print(line, highlight=False)
        summary["eval_outcomes"] = eval_outcomes
    summary["claim_split"] = "eval"
    if test is not None and test.history:
        tested = split_report("test", test.history, test.outcomes, test.floor)
        summary["test"] = {**tested, "outcomes": test.outcomes}
        summary["claim_split"] = "test"
        if "evals" in tested:
            console.print(summary_table(tested["evals"], "held-out test (the claim)", explain=False))
            for line in tested.get("verdict", []):
                console.print(f"test: {line}", highlight=False)
    if held_out is not None:
        summary["held_out"] = summary_record(held_out)
        for split, measured in held_out.get("overlap", {}).items():
            console.print(f"held-out {split}: {measured['tasks']} tasks, {measured['trained_on']} of them trained on "
                          f"(measured; {held_out['training']['held_out_skipped']} held-out tasks skipped by the "
                          "training streams)", highlight=False)
    if untrained_line:
        summary["untrained_iterations"] = list(untrained)
        console.print(f"[bold red]{untrained_line}", highlight=False)
    claim = ("test", test.outcomes, test.floor) if summary["claim_split"] == "test" and test is not None else \
        ("eval", eval_outcomes, floor)
    plain = plain_verdict(*claim, method=method, warm_start=warm_started)
    if plain:
        summary["plain_verdict"] = plain
        console.print(f"\n[bold]What this run shows[/] (the {claim[0]} split):", highlight=False)
        for line in plain:
            console.print(f"  - {line}", highlight=False)
    if closing_hint:
        console.print(f"  Next: {closing_hint}", highlight=False)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(f"run dir: {run_dir}\ncurves: {plot}\ntrajectories: {view_hint(run_dir)}",
                  soft_wrap=True)  # paths to copy: never folded
    return summary
