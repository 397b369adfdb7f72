"""`agentforge sweep-report <multirun dir> ...`: one table and one plot from the jobs of a Hydra sweep.

`agentforge train recipe=tjpo_alfworld --multirun algorithm.lambda=0,0.1,0.3,0.5` writes one run dir per job
(`multirun/train/<time>/<job number>/`, each with `.hydra/overrides.yaml`, `metrics.jsonl` and, once finished,
`summary.json`). The report lines the swept overrides up against each job's final eval: success rate, mean return,
mean successful length, success by the expert's solution length (1, 2, 3+ moves, with intervals, where the env
has an expert) and the diversity metrics the trainer's eval logs (`eval/div_pair/<descriptor>`,
`eval/div_dpp/<descriptor>`). A job that failed or is still running gets its status and its latest eval, if any;
it never stops the report.

`--baseline <job | key=value[,key=value]>` names the row every other job is compared with, paired task by task on
the final eval's per-task outcomes (summary.json's `eval_outcomes`: the same held-out tasks and sampling seeds in
every job of a sweep): the difference in success with its 95 % interval (agentforge/stats.py), matched
seed by seed when the baseline has a job per seed. That cell compares two training runs, one seed each: its interval
is eval noise only, and a mark there says these two runs differ, not that the setting does (two runs of one setting
differ by more than their eval noise). Where a setting (the swept overrides but the seed) has jobs of several seeds
matched with the baseline's, the report adds the comparison over training seeds (agentforge.stats.seed_difference:
an interval with run-to-run variance, no verdict under 3 seeds): the only place it judges a setting. The random floor
(summary.json's "random floor" row) is drawn on the plot.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentforge.errors import AgentforgeError
from agentforge.evaluation.sweep_jobs import Job, find_job_dirs, is_job_dir, read_job

DPP_SCALE = 1e3
BASE_COLUMNS = (("success [95 %]", "eval/success_rate"), ("return", "eval/mean_return"),
                ("succ. len", "eval/mean_success_length"), ("tok/succ.", "eval/tokens_per_success"),
                ("think tok/turn", "eval/think_tokens_per_turn"), ("forced turns", "eval/forced_turn_rate"),
                ("regen./turn (train)", "train/regeneration_rate"),
                ("flagged steps (train)", "train/strata/judgment_flag_rate"),
                ("judgment unparsed (train)", "train/strata/judgment_parse_failure_rate"),
                ("strategy cos. kept (train)", "train/strata/strategy_cosine_chosen"),
                ("strategy cos. all (train)", "train/strata/strategy_cosine_candidates"))
# shown only where some job has a non-zero value (T2PO's TTI and TDS; 0 for every other algorithm)
NONZERO_COLUMNS = ("eval/forced_turn_rate", "train/regeneration_rate")


def swept_keys(jobs: list[Job]) -> list[str]:
    """Override keys given different values by the jobs that set them (all of one job's overrides when there is only
    one). A key only some jobs set (several sweeps gathered at once) is not swept by that alone."""
    keys: list[str] = []
    for job in jobs:
        keys += [k for k in job.overrides if k not in keys]
    if len(jobs) == 1:
        return keys
    return [k for k in keys if len({job.overrides[k] for job in jobs if k in job.overrides}) > 1]


def diversity_keys(jobs: list[Job]) -> list[str]:
    """eval/div_pair/<d> and eval/div_dpp/<d> found in any job, descriptor by descriptor."""
    names: list[str] = []
    for job in jobs:
        for key in job.metrics:
            if key.startswith(("eval/div_pair/", "eval/div_dpp/", "eval/div_groups/")):
                name = key.split("/", 2)[2]
                if name not in names:
                    names.append(name)
    return [f"eval/{kind}/{name}" for name in names for kind in ("div_pair", "div_dpp")]


DEPTH_BUCKETS = ("1", "2", "3+")  # evaluation/depth.py: success by the expert's solution length


def depth_keys(jobs: list[Job]) -> list[str]:
    """eval/success_depth_<b> where some job logged it (an env with an expert: success by solution length)."""
    return [f"eval/success_depth_{b}" for b in DEPTH_BUCKETS
            if any(f"eval/success_depth_{b}" in job.metrics for job in jobs)]


def metric_header(key: str) -> str:
    if key.startswith("eval/div_dpp/"):
        return f"D^dpp {key.split('/', 2)[2]} (×10⁻³)"
    if key.startswith("eval/div_pair/"):
        return f"D^pair {key.split('/', 2)[2]}"
    if key.startswith("eval/success_depth_"):
        return f"success, {key.removeprefix('eval/success_depth_')}-move tasks [95 %]"
    return dict((k, h) for h, k in BASE_COLUMNS).get(key, key)


def _cell(key: str, value: float | None, metrics: dict[str, Any] | None = None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    if key.startswith("eval/div_dpp/"):
        return f"{value * DPP_SCALE:.3f}"
    if key.startswith("eval/success_depth_") and metrics is not None:
        low, high = metrics.get(f"{key}_lo"), metrics.get(f"{key}_hi")
        bucket = key.removeprefix("eval/success_depth_")
        n = metrics.get(f"eval/episodes_depth_{bucket}")
        interval = f" [{low:.2f}, {high:.2f}]" if isinstance(low, int | float) and isinstance(high, int | float) \
            else ""
        return f"{value:.4f}{interval}" + (f" (n={int(n)})" if isinstance(n, int | float) else "")
    if key == "eval/success_rate" and metrics and isinstance(metrics.get("eval/episodes"), int | float) \
            and metrics["eval/episodes"] > 0:
        from agentforge.stats import wilson_interval

        n = float(metrics["eval/episodes"])
        low, high = wilson_interval(value * n, n)
        return f"{value:.4f} [{low:.2f}, {high:.2f}]"  # 95 % interval: jobs differ beyond noise when apart
    return f"{value:.4f}" if "div_pair" in key or "success_rate" in key else f"{value:.3f}"


@dataclass
class SweepReport:
    jobs: list[Job]
    swept: list[str]
    metrics: list[str]
    x_key: str | None
    y2_key: str | None

    baseline: str | None = None
    settings: list[dict[str, Any]] = field(default_factory=list)  # settings vs the baseline over training seeds

    def header(self) -> list[str]:
        versus = [f"Δ success vs {self.baseline} [95 %, paired; one run per side: eval noise only]"] \
            if self.baseline else []
        return ["job", *self.swept, "status", "eval iter", *(metric_header(k) for k in self.metrics), *versus]

    def rows(self) -> list[list[str]]:
        out = []
        for job in self.jobs:
            progress = "–" if job.iteration is None else str(job.iteration)
            if job.iterations and job.iteration is not None:
                progress += f"/{job.iterations}"
            versus = [versus_cell(job)] if self.baseline else []
            out.append([job.name, *(job.overrides.get(k, "–") for k in self.swept), job.status, progress,
                        *(_cell(k, job.metrics.get(k), job.metrics) for k in self.metrics), *versus])
        return out

    def markdown(self) -> str:
        header, rows = self.header(), self.rows()
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        notes = [f"- {job.name}: {job.status}: {job.note}" for job in self.jobs if job.note]
        text = "\n".join(lines) + "\n\nFinal eval of each job (latest eval for running or failed jobs). D^dpp in " \
               "units of 10⁻³; diversity over each eval prompt's successful rollouts.\n"
        if self.baseline:
            text += f"\n{VERSUS_NOTE}\n"
        if self.settings:
            text += "\n" + "\n".join(settings_lines(self.baseline, self.settings)) + "\n"
        return text + ("\n" + "\n".join(notes) + "\n" if notes else "")

    def to_json(self) -> dict[str, Any]:
        return {"swept": self.swept, "metrics": self.metrics, "x": self.x_key, "diversity_metric": self.y2_key,
                "baseline": self.baseline, "jobs": [job.to_json(self.swept) for job in self.jobs],
                "settings_over_seeds": self.settings}


# ---- the paired comparison with a baseline row -----------------------------------------------------------------
VERSUS_NOTE = ("Δ success vs the baseline, per job: the job's run against the baseline's run of its seed, paired task "
               "by task: one training run per side, so the interval is eval noise only; * marks two runs that differ "
               "beyond it, not a setting that does (that needs several seeds: the table over training seeds).")
ONE_RUN_SCOPE = "one training run per side: eval noise only (these two runs, not the setting)"


def versus_cell(job: Job) -> str:
    if job.versus is None:
        return "–"
    if job.versus.get("baseline_row"):
        return "baseline"
    if "difference" not in job.versus:
        return job.versus.get("note", "–")
    mark = " *" if job.versus["beyond_noise"] else ""
    return f"{job.versus['difference']:+.1%} [{job.versus['low']:+.1%}, {job.versus['high']:+.1%}]{mark}"


def select_baseline(jobs: list[Job], spec: str) -> list[Job]:
    """The jobs `--baseline` names: a job name (`<time>/<n>` or `<n>`), or key=value pairs all of a job's
    overrides must match."""
    if "=" in spec:
        wanted = dict(part.split("=", 1) for part in spec.split(",") if part)
        chosen = [j for j in jobs if all(j.overrides.get(k) == v for k, v in wanted.items())]
    else:
        chosen = [j for j in jobs if spec in (j.name, j.path.name)]
    if not chosen:
        raise AgentforgeError(f"sweep-report: --baseline {spec} matches no job; jobs: "
                              f"{', '.join(j.name for j in jobs)} (or give key=value of a swept override)")
    return chosen


def compare_with_baseline(jobs: list[Job], spec: str) -> dict[Path, Job]:
    """Each job's paired difference in final-eval success against the baseline job of its seed (or the only one);
    returns each compared job's partner of the same seed (what the comparison over seeds pairs)."""
    from agentforge.stats import paired_difference

    baselines = select_baseline(jobs, spec)
    same_seed_partners: dict[Path, Job] = {}
    for job in jobs:
        if job in baselines:
            job.versus = {"baseline_row": True}
            continue
        same_seed = [b for b in baselines if b.seed == job.seed]
        partner = same_seed[0] if same_seed else (baselines[0] if len(baselines) == 1 else None)
        if partner is None:
            job.versus = {"note": f"no baseline job with seed {job.seed}"}
        elif job.outcomes is None or partner.outcomes is None:
            job.versus = {"note": "no per-task outcomes (unfinished, or a run from before paired verdicts)"}
        else:
            try:
                job.versus = {"baseline": partner.name, "training_seeds": 1, "scope": ONE_RUN_SCOPE,
                              **paired_difference(partner.outcomes, job.outcomes).to_json()}
            except ValueError as error:
                job.versus = {"note": str(error)}
                continue
            if same_seed:
                same_seed_partners[job.path] = partner
    return same_seed_partners


def compare_settings(jobs: list[Job], swept: list[str], partners: dict[Path, Job]) -> list[dict[str, Any]]:
    """Each setting (the swept overrides but the seed) against the baseline over training seeds: its jobs paired with
    the baseline's job of the same seed (agentforge.stats.seed_difference). Only settings with ≥ 2 such seeds: one
    seed is the per-job cell already, and it judges no setting."""
    from agentforge.stats import seed_difference

    keys = [k for k in swept if k != "seed"]
    groups: dict[tuple[str, ...], dict[str, Job]] = {}
    for job in jobs:
        if job.path in partners:
            groups.setdefault(tuple(job.overrides.get(k, "–") for k in keys), {}).setdefault(str(job.seed), job)
    out = []
    for values, by_seed in groups.items():
        if len(by_seed) < 2:
            continue
        seeds = sorted(by_seed)
        verdict = seed_difference([partners[by_seed[s].path].outcomes or {} for s in seeds],
                                  [by_seed[s].outcomes or {} for s in seeds])
        out.append({"setting": dict(zip(keys, values, strict=True)), "seed_ids": seeds, **verdict.to_json()})
    return out


def settings_lines(baseline: str | None, settings: list[dict[str, Any]]) -> list[str]:
    """The markdown table of the settings against the baseline over training seeds."""
    from agentforge.stats import SEED_METHOD

    lines = [f"Settings vs {baseline} over training seeds (each seed's run against the baseline's run of that seed; "
             f"{SEED_METHOD}; no verdict under 3 seeds):", "",
             "| setting | training seeds | Δ success [95 %] | per seed | verdict |", "|---|---|---|---|---|"]
    for row in settings:
        setting = ", ".join(f"{k}={v}" for k, v in row["setting"].items()) or "(all but the seed alike)"
        per_seed = " / ".join(f"{d:+.1%}" for d in row["per_seed"])
        lines.append(f"| {setting} | {row['seeds']} ({', '.join(row['seed_ids'])}) | {row['difference']:+.1%} "
                     f"[{row['low']:+.1%}, {row['high']:+.1%}] | {per_seed} | {row['direction']} "
                     f"(p={row['p_value']:.3g}) |")
    return lines


def _is_number(text: str | None) -> bool:
    try:
        return text is not None and math.isfinite(float(text))
    except ValueError:
        return False


def choose_x(jobs: list[Job], swept: list[str]) -> str | None:
    """λ when it was swept, else the first swept key whose every value is a number."""
    numeric = [k for k in swept if all(_is_number(job.overrides.get(k)) for job in jobs)]
    for key in numeric:
        if key.endswith("lambda"):
            return key
    return numeric[0] if numeric else None


def optimised_diversity_key(jobs: list[Job], available: list[str]) -> str | None:
    """The diversity metric the runs optimise (TJPO's descriptor and functional), else the first one logged."""
    for job in jobs:
        algorithm = job.config.get("algorithm") or {}
        descriptor = algorithm.get("descriptor")
        if descriptor:
            kind = "div_dpp" if algorithm.get("functional") == "determinantal" else "div_pair"
            key = f"eval/{kind}/{descriptor}"
            if key in available:
                return key
    return available[0] if available else None


def build_report(jobs: list[Job], diversity_metric: str | None = None, baseline: str | None = None) -> SweepReport:
    swept = swept_keys(jobs)
    div = diversity_keys(jobs)
    base = [key for _, key in BASE_COLUMNS if any(
        job.metrics.get(key) if key in NONZERO_COLUMNS else key in job.metrics for job in jobs)]
    y2 = diversity_metric or optimised_diversity_key(jobs, div)
    if y2 is not None and not y2.startswith("eval/"):
        y2 = f"eval/{y2}"
    if diversity_metric and y2 not in div:
        raise AgentforgeError(f"sweep-report: --metric {diversity_metric} was not logged by any job; logged diversity "
                              f"metrics: {', '.join(div) or '(none)'}")
    settings = compare_settings(jobs, swept, compare_with_baseline(jobs, baseline)) if baseline else []
    return SweepReport(jobs, swept, base + depth_keys(jobs) + div, choose_x(jobs, swept), y2, baseline, settings)


# ---- the plot --------------------------------------------------------------------------------------------------
def plot_report(report: SweepReport, out: Path) -> Path:
    """Success (left axis) and the diversity metric (right axis) against the swept value; one line per combination
    of the other swept keys. Jobs without an eval are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jobs = [j for j in report.jobs if "eval/success_rate" in j.metrics]
    others = [k for k in report.swept if k != report.x_key]
    series: dict[str, list[Job]] = {}
    for job in jobs:
        label = ", ".join(f"{k}={job.overrides.get(k, '–')}" for k in others)
        series.setdefault(label, []).append(job)
    fig, left = plt.subplots(figsize=(7, 4.2))
    right = left.twinx() if report.y2_key else None
    labels = [j.name for j in jobs]
    for i, (label, members) in enumerate(series.items()):
        if report.x_key:
            members = sorted(members, key=lambda j: float(j.overrides[report.x_key]))
            xs = [float(j.overrides[report.x_key]) for j in members]
        else:
            xs = [labels.index(j.name) for j in members]
        color = f"C{i % 10}"
        suffix = f" ({label})" if label else ""
        left.plot(xs, [j.metrics["eval/success_rate"] for j in members], "o-", color=color, label=f"success{suffix}")
        if right is not None:
            scale = DPP_SCALE if "div_dpp" in report.y2_key else 1.0
            points = [(x, j.metrics.get(report.y2_key, math.nan) * scale) for x, j in zip(xs, members, strict=True)]
            points = [(x, y) for x, y in points if math.isfinite(y)]  # no successes: no diversity value, no point
            right.plot([x for x, _ in points], [y for _, y in points], "s--", color=color, alpha=0.8,
                       label=f"{metric_header(report.y2_key)}{suffix}")
    floors = [j.floor for j in jobs if j.floor is not None]
    if floors:
        left.axhline(sum(floors) / len(floors), color="grey", linestyle=":", label="random floor")
    left.set_xlabel(report.x_key or "job")
    if not report.x_key:
        left.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    left.set_ylabel("eval success rate")
    left.set_ylim(-0.02, 1.02)
    handles, names = left.get_legend_handles_labels()
    if right is not None:
        right.set_ylabel(metric_header(report.y2_key))
        more_handles, more_names = right.get_legend_handles_labels()
        handles, names = handles + more_handles, names + more_names
    if handles:
        left.legend(handles, names, fontsize=8, loc="best")
    left.set_title("sweep: success (solid) vs diversity (dashed)" if right is not None else "sweep: success")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


# ---- command ---------------------------------------------------------------------------------------------------
def write_report(report: SweepReport, folder: Path) -> dict[str, Path]:
    paths = {"md": folder / "sweep_report.md", "json": folder / "sweep_report.json",
             "png": folder / "sweep_report.png"}
    paths["md"].write_text(report.markdown())
    paths["json"].write_text(json.dumps(report.to_json(), indent=2))
    plot_report(report, paths["png"])
    return paths


def default_output(target: str) -> Path:
    """The first multirun dir a target names (a job dir's parent)."""
    first = Path((sorted(glob.glob(str(Path(target).expanduser()))) or [target])[0])
    return first.parent if is_job_dir(first) else first


def sweep_report(targets: list[str], output: str | None = None, metric: str | None = None,
                 baseline: str | None = None) -> SweepReport:
    """Gather the jobs, write sweep_report.{md,json,png} (into `output`, else the first target dir), print it."""
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True)
    if not console.is_terminal:  # a log file or a pipe: don't squeeze the table into 80 columns
        console = Console(stderr=True, width=200)
    job_dirs = find_job_dirs(targets)
    now = time.time()
    report = build_report([read_job(p, now) for p in job_dirs], metric, baseline)
    folder = Path(output) if output else default_output(targets[0])
    folder.mkdir(parents=True, exist_ok=True)
    paths = write_report(report, folder)
    table = Table(title=f"sweep: {len(report.jobs)} jobs", caption="D^dpp in units of 10⁻³")
    for i, name in enumerate(report.header()):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in report.rows():
        table.add_row(*row)
    console.print(table)
    if report.baseline:
        console.print(VERSUS_NOTE, markup=False)
    if report.settings:
        console.print("\n".join(settings_lines(report.baseline, report.settings)), markup=False)
    for job in report.jobs:
        if job.note:
            console.print(f"[yellow]{job.name}: {job.status}: {job.note}")
    console.print("\n".join(f"{kind}: {path}" for kind, path in paths.items()))
    return report


def sweep_report_command(args: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="agentforge sweep-report",
        description="Gather the jobs of `agentforge train ... --multirun` into one table and plot.")
    parser.add_argument("dirs", nargs="+", help="multirun dir(s) (multirun/train/<time>), job dirs, or globs")
    parser.add_argument("--output", help="folder for sweep_report.{md,json,png} (default: the first multirun dir)")
    parser.add_argument("--metric", help="diversity metric on the plot's right axis, e.g. div_pair/location "
                                         "(default: the one the runs optimise)")
    parser.add_argument("--baseline", help="the row the others are compared with, paired task by task (difference "
                                           "in success with its 95 %% interval, one run per side: eval noise only; "
                                           "settings with several seeds also over training seeds): a job name, or "
                                           "key=value[,key=value] of its overrides, e.g. algorithm=grpo")
    options = parser.parse_args(args)
    sweep_report(options.dirs, options.output, options.metric, options.baseline)
    return 0
