"""How an evaluation is shown and stored: a rich console table, a paste-ready markdown table, eval.json and the
main row's trajectories.jsonl. D^dpp appears ×10⁻³ in the tables (as in the TJPO paper) and raw in eval.json."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.table import Table

from agentforge.types import Group

DPP_SCALE = 1e3  # tables show D^dpp in units of 10⁻³
FOOTNOTE = ("D^pair: mean pairwise Euclidean distance, D^dpp: det(K+ηI)^(1/n) in units of 10⁻³, both over each "
            "prompt's successful rollouts and averaged over the prompts with ≥ 2 successes (column n).")


def _number(value: Any, digits: int, scale: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{float(value) * scale:.{digits}f}"


# columns shown only when some row has the metric (an algorithm's own report, e.g. TrajEvolve's eval_labels)
OPTIONAL_COLUMNS = [("Redundant", "trajevolve/redundant_step_fraction", 3, 1.0),
                    # success by the length of the plan a task needs (evaluation/depth.py), where the env has an expert
                    ("1 move", "success_depth_1", 3, 1.0), ("2 moves", "success_depth_2", 3, 1.0),
                    ("3+ moves", "success_depth_3+", 3, 1.0)]


def table_columns(descriptors: list[str], present: set[str] | None = None) -> list[tuple[str, str, int, float]]:
    """(header, metric key, digits, scale) of every column after the method's name; `present`: the metric keys
    some row has (optional columns are shown only then). Steps and Succ. len are the TrajEvolve paper's
    redundancy table (mean steps over all and over successful trajectories)."""
    columns = [("Success", "success_rate", 4, 1.0), ("Reward", "mean_return", 3, 1.0),
               ("Steps", "mean_turns", 2, 1.0), ("Succ. len", "mean_success_length", 2, 1.0),
               ("Tok/succ.", "tokens_per_success", 1, 1.0), ("Think tok/turn", "think_tokens_per_turn", 1, 1.0),
               ("Invalid", "invalid_action_rate", 3, 1.0)]
    columns += [c for c in OPTIONAL_COLUMNS if c[1] in (present or set())]
    for name in descriptors:
        columns.append((f"D^pair {name}", f"div_pair/{name}", 4, 1.0))
        columns.append((f"D^dpp {name} (×10⁻³)", f"div_dpp/{name}", 3, DPP_SCALE))
    if descriptors:
        columns.append(("n", f"div_groups/{descriptors[0]}", 0, 1.0))
    return columns


def success_cell(metrics: dict[str, Any], digits: int = 4) -> str:
    """The success rate with its 95 % Wilson interval over the row's episodes, so rows can be read as beyond noise
    (intervals apart) or not."""
    from agentforge.stats import wilson_interval

    value, episodes = metrics.get("success_rate"), metrics.get("episodes")
    text = _number(value, digits)
    if text == "–" or not isinstance(episodes, int | float) or episodes <= 0:
        return text
    low, high = wilson_interval(float(value) * float(episodes), float(episodes))
    return f"{text} [{low:.2f}, {high:.2f}]"


def table_cells(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    columns = table_columns(report["descriptors"], {key for row in report["rows"] for key in row["metrics"]})
    header = ["Method", *(f"{c[0]} [95 %]" if c[1] == "success_rate" else c[0] for c in columns)]
    rows = [[row["name"], *(success_cell(row["metrics"], digits) if key == "success_rate"
                            else _number(row["metrics"].get(key), digits, scale)
                            for _, key, digits, scale in columns)]
            for row in report["rows"]]
    return header, rows


def title(report: dict[str, Any]) -> str:
    return (f"{report['env']}: {report['tasks']['num_tasks']} {report['tasks']['split']} prompts × "
            f"{report['samples_per_task']} samples at T={report['temperature']}")


def eval_table(report: dict[str, Any]) -> Table:
    """The console view: one column per method and one row per metric (a terminal is narrower than a paper)."""
    header, rows = table_cells(report)
    table = Table(title=title(report), caption=FOOTNOTE)
    table.add_column("metric")
    for row in rows:
        table.add_column(row[0], justify="right")
    for i, name in enumerate(header[1:], start=1):
        table.add_row(name, *(row[i] for row in rows))
    return table


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def eval_markdown(report: dict[str, Any]) -> str:
    header, rows = table_cells(report)
    parts = [f"### {title(report)}", "", markdown_table(header, rows), "", FOOTNOTE]
    if report.get("checkpoint"):
        parts.append(f"Checkpoint: `{report['checkpoint']['path']}`.")
    if report.get("comparison"):
        parts.append(f"Paired comparison (same tasks, same sampling seed): {report['comparison']['text']}.")
    if report.get("interventions"):
        iv_header, iv_rows = intervention_cells(report["interventions"])
        parts += ["", "#### Interventions", "", markdown_table(iv_header, iv_rows), "",
                  "User Constraints counts a success only without a confirmed visit to the forbidden locations."]
    return "\n".join(parts) + "\n"


# ---- interventions ---------------------------------------------------------------------------------------------
INTERVENTION_COLUMNS = (("Standard", "standard"), ("User Constraints", "user_constraint"),
                        ("Disruption", "disruption"))


def intervention_cells(interventions: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["Method", *(name for name, _ in INTERVENTION_COLUMNS), "episodes"]
    rates = interventions["success_rate"]
    row = [interventions["name"], *(_number(rates.get(key), 2, 100.0) + " %" for _, key in INTERVENTION_COLUMNS),
           str(interventions.get("episodes_per_condition", ""))]
    return header, [row]


def intervention_table(interventions: dict[str, Any]) -> Table:
    header, rows = intervention_cells(interventions)
    table = Table(title=f"ALFWorld interventions ({interventions.get('cases')} cases)",
                  caption="User Constraints: success without a confirmed visit to a forbidden location")
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return table


# ---- files -----------------------------------------------------------------------------------------------------
def write_eval_outputs(folder: Path, report: dict[str, Any], groups: list[Group],
                       intervention_groups: dict[str, list[Group]] | None = None) -> dict[str, Path]:
    """eval.json, eval.md, the main row's trajectories.jsonl and, with interventions, trajectories_<condition>.jsonl."""
    from agentforge.tracking.trajectories import write_trajectories

    paths = {"eval.json": folder / "eval.json", "eval.md": folder / "eval.md",
             "trajectories": folder / "trajectories.jsonl"}
    dump_json(paths["eval.json"], report)
    paths["eval.md"].write_text(eval_markdown(report))
    write_trajectories(paths["trajectories"], groups, with_tokens=False)
    for condition, played in (intervention_groups or {}).items():
        paths[f"trajectories ({condition})"] = folder / f"trajectories_{condition}.jsonl"
        write_trajectories(paths[f"trajectories ({condition})"], played, with_tokens=False)
    return paths


def finite_or_none(value: Any) -> Any:
    """JSON has no NaN: metrics no group qualified for are written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_none(v) for v in value]
    return value


def dump_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(finite_or_none(data), indent=2, default=str))
