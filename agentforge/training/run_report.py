"""A finished run's report: the training curves, the eval table, the paired verdicts and `summary.json`.

Why here: what a run says at its end reads only the run's eval history, so it stands apart from the loop that
made it (and can be read, and changed, without the loop).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentforge.evaluation.summary import eval_row, floor_row, run_verdicts, summary_table, verdict, view_hint
from agentforge.tracking.plotting import plot_training_curves
from agentforge.tracking.progress import console


def final_report(run_dir: Path, title: str, history: dict[str, dict[str, float]],
                 eval_outcomes: dict[str, dict[str, list[bool]]], floor: dict[str, list[bool]] | None,
                 untrained: list[int], untrained_line: str | None) -> dict[str, Any]:
    """Plot, print and write the run's summary: each eval as a row (the model as given, each iteration, the random
    floor), the verdicts between them on the same tasks, and the iterations that trained nothing."""
    floor_rate = floor_row(floor)["success"] if floor else None
    plot = plot_training_curves(run_dir / "metrics.jsonl", run_dir / "training_curves.png", title, floor=floor_rate)
    evals = sorted(((k, v) for k, v in history.items() if k != "base"), key=lambda kv: int(kv[0]))
    summary: dict[str, Any] = {"run_dir": str(run_dir), "plot": str(plot)}
    rows = []
    if "base" in history:
        summary["base"] = history["base"]
        rows.append(eval_row("model as given", history["base"]))
    if evals:
        summary["before"] = {"iteration": int(evals[0][0]), **evals[0][1]}
        summary["after"] = {"iteration": int(evals[-1][0]), **evals[-1][1]}
        warm = " (after the warm start)" if "base" in history and int(evals[0][0]) == 0 else ""
        rows += [eval_row(f"iteration {k}{warm if k == '0' else ''}", v) for k, v in evals]
    if floor and rows:
        rows.append(floor_row(floor))
    if rows:
        summary["evals"] = rows
        console.print(summary_table(rows))
        named = [(row["name"], eval_outcomes[key]) for row, key in zip(
            rows, (["base"] if "base" in history else []) + [k for k, _ in evals], strict=False)
            if key in eval_outcomes]
        records = run_verdicts(named, floor)
        lines = [r["text"] for r in records]
        model_rows = [r for r in rows if r.get("valid_format") is not None]
        if len(model_rows) > 1:
            lines.append(verdict(model_rows[0], model_rows[-1]))
        if records:
            summary["verdicts"] = records
        if lines:
            summary["verdict"] = lines
        for line in lines:
            console.print(line, highlight=False)
        summary["eval_outcomes"] = eval_outcomes
    if untrained_line:
        summary["untrained_iterations"] = list(untrained)
        console.print(f"[bold red]{untrained_line}", highlight=False)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(f"run dir: {run_dir}\ncurves: {plot}\ntrajectories: {view_hint(run_dir)}",
                  soft_wrap=True)  # paths to copy: never folded
    return summary
