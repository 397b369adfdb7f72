"""`agentforge sweep-report` on hand-made job dirs: statuses, swept keys, the table, the plot, bad paths."""

from __future__ import annotations

import json
import os
import time

import pytest

from agentforge.errors import AgentforgeError
from agentforge.evaluation.sweep_jobs import FAILED_MARKER, STALE_SECONDS, find_job_dirs, parse_overrides, read_job
from agentforge.evaluation.sweep_report import build_report, sweep_report

pytestmark = pytest.mark.unit


def make_job(root, number, overrides, evals=(), summary=None, failed=None, descriptor="location"):
    job = root / str(number)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (job / "config.yaml").write_text(f"trainer:\n  iterations: 4\nalgorithm:\n  name: tjpo\n  descriptor: "
                                     f"{descriptor}\n  functional: pairwise\n")
    lines = [{"iteration": 1, "train/loss": 0.1}, *({"iteration": i, **e} for i, e in evals)]
    (job / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if summary is not None:
        (job / "summary.json").write_text(json.dumps({"after": summary}))
    if failed is not None:
        (job / FAILED_MARKER).write_text(failed + "\n")
    return job


def eval_metrics(success, pair):
    """NaN is logged as the string "NaN" (tracking.py), as the trainer's metrics.jsonl has it."""
    return {"eval/success_rate": success, "eval/mean_return": success * 10, "eval/div_pair/location": pair,
            "eval/div_dpp/location": pair / 100 if isinstance(pair, float) else pair, "eval/div_groups/location": 3.0}


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "multirun"
    make_job(root, 0, ["recipe=tjpo_alfworld", "algorithm.lambda=0"],
             [(4, eval_metrics(0.9, 0.08))], summary={"iteration": 4, **eval_metrics(0.9, 0.08)})
    make_job(root, 1, ["recipe=tjpo_alfworld", "algorithm.lambda=0.5"],
             [(4, eval_metrics(0.8, 0.13))], summary={"iteration": 4, **eval_metrics(0.8, 0.13)})
    make_job(root, 2, ["recipe=tjpo_alfworld", "algorithm.lambda=0.3"], [(2, eval_metrics(0.85, 0.1))],
             failed="EnvWorkerError: the alfworld worker died")
    make_job(root, 10, ["recipe=tjpo_alfworld", "algorithm.lambda=0.1"], [(2, eval_metrics(0.7, "NaN"))])
    return root


def test_statuses_swept_keys_and_latest_evals(sweep):
    report = build_report([read_job(p) for p in find_job_dirs([str(sweep)])])
    assert [j.path.name for j in report.jobs] == ["0", "1", "2", "10"]  # numeric job order
    assert [j.status for j in report.jobs] == ["finished", "finished", "failed", "running"]
    assert report.swept == ["algorithm.lambda"] and report.x_key == "algorithm.lambda"
    assert report.y2_key == "eval/div_pair/location"  # what the runs optimise
    assert report.jobs[2].iteration == 2 and "worker died" in report.jobs[2].note
    assert math_nan(report.jobs[3].metrics["eval/div_pair/location"])
    header = report.header()
    assert header[:4] == ["job", "algorithm.lambda", "status", "eval iter"]
    assert "D^dpp location (×10⁻³)" in header
    rows = report.rows()
    assert rows[0][1:4] == ["0", "finished", "4/4"] and rows[3][-2] == "–"
    assert rows[0][header.index("D^dpp location (×10⁻³)")] == "0.800"
    assert rows[0][header.index("success [95 %]")] == "0.9000"  # no episode count logged: no interval


def test_success_cells_carry_their_95_percent_interval(tmp_path):
    root = tmp_path / "multirun"
    metrics = {**eval_metrics(0.625, 0.1), "eval/episodes": 32}
    make_job(root, 0, ["recipe=tjpo_alfworld", "algorithm.lambda=0"], [(4, metrics)], summary={"iteration": 4,
                                                                                                 **metrics})
    report = build_report([read_job(p) for p in find_job_dirs([str(root)])])
    assert report.rows()[0][report.header().index("success [95 %]")] == "0.6250 [0.45, 0.77]"


def math_nan(value):
    return value != value


def test_a_job_without_activity_for_long_is_reported_failed(sweep):
    job = sweep / "10"
    old = time.time() - STALE_SECONDS - 60
    for path in [job, *job.iterdir()]:
        os.utime(path, (old, old))
    assert read_job(job).status == "failed" and "no activity" in read_job(job).note


def test_report_files_and_plot_are_written(sweep, tmp_path):
    report = sweep_report([str(sweep)])
    assert len(report.jobs) == 4
    assert (sweep / "sweep_report.png").stat().st_size > 10_000
    data = json.loads((sweep / "sweep_report.json").read_text())
    assert [j["status"] for j in data["jobs"]] == ["finished", "finished", "failed", "running"]
    assert data["jobs"][3]["metrics"]["eval/div_pair/location"] is None  # JSON null, not NaN
    markdown = (sweep / "sweep_report.md").read_text()
    assert markdown.count("\n| multirun/") == 4
    # a glob of job dirs and an explicit output folder; --metric picks the plotted diversity metric
    other = sweep_report([str(sweep / "[01]")], output=str(tmp_path / "out"), metric="div_dpp/location")
    assert len(other.jobs) == 2 and other.y2_key == "eval/div_dpp/location"
    assert (tmp_path / "out" / "sweep_report.png").exists()


def test_bad_paths_and_metrics_say_what_was_expected(sweep, tmp_path):
    with pytest.raises(AgentforgeError, match="no Hydra jobs under"):
        find_job_dirs([str(tmp_path / "multirun" / "0" / ".hydra")])
    with pytest.raises(AgentforgeError, match="not a directory"):
        find_job_dirs([str(tmp_path / "nowhere")])
    with pytest.raises(AgentforgeError, match="logged diversity metrics: eval/div_pair/location"):
        sweep_report([str(sweep)], metric="div_pair/action_type")


def test_overrides_parse_hydra_syntax():
    assert parse_overrides(["+x.y=1", "~z", "a=b=c"]) == {"x.y": "1", "z": "(deleted)", "a": "b=c"}


def test_keys_only_some_gathered_jobs_set_are_not_swept_by_that_alone(sweep, tmp_path):
    make_job(tmp_path / "other", 0, ["algorithm.lambda=0.7"])
    jobs = [read_job(p) for p in find_job_dirs([str(sweep), str(tmp_path / "other")])]
    assert build_report(jobs).swept == ["algorithm.lambda"]


def test_efficiency_columns_and_t2po_rates(tmp_path):
    """T2PO's efficiency columns: tokens per success and thinking always; forced turns (TTI) and the training
    regeneration rate (TDS) only where some job has them non-zero."""
    root = tmp_path / "multirun"
    for number, (alpha, forced, regen) in enumerate([(0.2, 0.0, 0.0), (0.4, 0.25, 0.5)]):
        metrics = {**eval_metrics(0.5, 0.1), "eval/tokens_per_success": 40.0 + number,
                   "eval/think_tokens_per_turn": 9.0, "eval/forced_turn_rate": forced}
        make_job(root, number, ["recipe=t2po_sokoban", f"algorithm.alpha={alpha}"],
                 [(4, {**metrics, "train/regeneration_rate": regen})], summary={"iteration": 4, **metrics})
    report = build_report([read_job(p) for p in find_job_dirs([str(root)])])
    header = report.header()
    for column in ("tok/succ.", "think tok/turn", "forced turns", "regen./turn (train)"):
        assert column in header
    rows = report.rows()
    assert rows[1][header.index("regen./turn (train)")] == "0.500"
    assert rows[1][header.index("tok/succ.")] == "41.000"
    quiet = build_report([read_job(root / "0")])  # a job where neither fired: no TTI/TDS columns
    assert "forced turns" not in quiet.header() and "regen./turn (train)" not in quiet.header()


def test_strata_columns_are_run_means_of_training_metrics(tmp_path):
    """A κ sweep's table shows what κ changes: StraTA's flag rate (and parse failures, strategy cosines) as the mean
    over the iterations up to the reported eval, not one iteration's value; other algorithms get no such column."""
    root = tmp_path / "multirun"
    for number, (kappa, flags) in enumerate([(0.01, (0.1, 0.3)), (1.0, (0.0, 0.2))]):
        metrics = eval_metrics(0.5, 0.1)
        rows = [(1, {"train/strata/judgment_flag_rate": flags[0], "train/strata/strategy_cosine_chosen": 0.2}),
                (2, {**metrics, "train/strata/judgment_flag_rate": flags[1],
                     "train/strata/strategy_cosine_chosen": 0.4}),
                (3, {"train/strata/judgment_flag_rate": 0.9})]  # after the last eval: left out
        make_job(root, number, ["recipe=strata_sokoban", f"algorithm.kappa={kappa}"], rows,
                 summary={"iteration": 2, **metrics})
    report = build_report([read_job(p) for p in find_job_dirs([str(root)])])
    header, rows = report.header(), report.rows()
    assert report.swept == ["algorithm.kappa"]
    flagged = header.index("flagged steps (train)")
    assert [row[flagged] for row in rows] == ["0.200", "0.100"]
    assert rows[0][header.index("strategy cos. kept (train)")] == "0.300"
    assert "judgment unparsed (train)" not in header  # logged by no job


def test_no_strata_columns_for_other_algorithms(sweep):
    header = build_report([read_job(p) for p in find_job_dirs([str(sweep)])]).header()
    assert not any("(train)" in column for column in header)


def paired_job(root, number, overrides, wins, floor=None):
    """A finished job whose summary holds its final eval's per-task outcomes (as the trainer writes them)."""
    job = make_job(root, number, overrides, summary={"iteration": 4, "eval/success_rate": sum(wins) / len(wins),
                                                     "eval/episodes": len(wins)})
    summary = json.loads((job / "summary.json").read_text())
    summary["eval_outcomes"] = {"4": {f"sokoban:eval:{i}": [bool(w)] for i, w in enumerate(wins)}}
    if floor is not None:
        summary["evals"] = [{"name": "random floor", "success": floor}]
    (job / "summary.json").write_text(json.dumps(summary))
    return job


def test_baseline_rows_are_compared_task_by_task_and_seed_by_seed(tmp_path):
    lose = [1] * 20 + [0] * 80
    win = [1] * 40 + [0] * 60
    paired_job(tmp_path, 0, ["algorithm=grpo", "seed=0"], lose, floor=0.1)
    paired_job(tmp_path, 1, ["algorithm=gigpo", "seed=0"], win, floor=0.1)
    paired_job(tmp_path, 2, ["algorithm=grpo", "seed=1"], win)
    paired_job(tmp_path, 3, ["algorithm=gigpo", "seed=1"], win)
    report = sweep_report([str(tmp_path)], output=str(tmp_path / "out"), baseline="algorithm=grpo")
    by_name = {job.path.name: job for job in report.jobs}
    assert by_name["0"].versus == {"baseline_row": True} and by_name["2"].versus == {"baseline_row": True}
    seed0, seed1 = by_name["1"].versus, by_name["3"].versus
    assert seed0["baseline"].endswith("/0") and seed1["baseline"].endswith("/2")  # matched by seed
    assert seed0["difference"] == pytest.approx(0.2) and seed0["beyond_noise"]
    assert seed0["method"] == "exact McNemar; Tango score interval" and seed0["training_seeds"] == 1
    assert seed1["difference"] == 0.0 and not seed1["beyond_noise"]
    assert report.header()[-1].startswith("Δ success vs algorithm=grpo") and "eval noise only" in report.header()[-1]
    assert report.rows()[1][-1].endswith(" *") and report.rows()[0][-1] == "baseline"
    # the setting itself, over its two training seeds: +20 and 0 points, too few seeds for a verdict
    [setting] = report.settings
    assert setting["setting"] == {"algorithm": "gigpo"} and setting["seed_ids"] == ["0", "1"]
    assert setting["per_seed"] == (pytest.approx(0.2), 0.0) and setting["difference"] == pytest.approx(0.1)
    assert setting["direction"] == "no verdict (2 seeds; need ≥ 3)" and not setting["beyond_noise"]
    markdown = (tmp_path / "out" / "sweep_report.md").read_text()
    assert "| algorithm=gigpo | 2 (0, 1) | +10.0% [" in markdown and "not a setting that does" in markdown
    data = json.loads((tmp_path / "out" / "sweep_report.json").read_text())
    assert data["baseline"] == "algorithm=grpo" and data["jobs"][0]["random_floor"] == 0.1
    assert data["settings_over_seeds"][0]["seeds"] == 2
    with pytest.raises(AgentforgeError, match="--baseline algorithm=ppo matches no job"):
        sweep_report([str(tmp_path)], output=str(tmp_path / "out"), baseline="algorithm=ppo")


def test_a_setting_with_three_seeds_gets_a_verdict_over_training_seeds(tmp_path):
    """Three seeds of each setting: each seed's run against the baseline's run of that seed, then over the seeds;
    with one seed only (no seed swept) the report judges no setting."""
    base, better = [1] * 20 + [0] * 80, [1] * 45 + [0] * 55
    for seed in range(3):
        paired_job(tmp_path, 2 * seed, ["algorithm=grpo", f"seed={seed}"], base)
        gained = better[: 100 - seed] + [True] * seed  # 45, 46, 47 solved
        paired_job(tmp_path, 2 * seed + 1, ["algorithm=gigpo", f"seed={seed}"], gained)
    report = sweep_report([str(tmp_path)], output=str(tmp_path / "out"), baseline="algorithm=grpo")
    [setting] = report.settings
    assert setting["seeds"] == 3 and setting["direction"] == "better beyond noise" and setting["low"] > 0
    assert setting["per_seed"] == pytest.approx((0.25, 0.26, 0.27))
    single = tmp_path / "single"
    paired_job(single, 0, ["algorithm=grpo"], base)
    paired_job(single, 1, ["algorithm=gigpo"], better)
    assert sweep_report([str(single)], output=str(single / "out"), baseline="algorithm=grpo").settings == []


def test_success_by_solution_length_gets_a_column_per_bucket_with_its_interval(tmp_path):
    root = tmp_path / "multirun"
    depth = {"eval/success_depth_1": 0.75, "eval/success_depth_1_lo": 0.5, "eval/success_depth_1_hi": 0.9,
             "eval/episodes_depth_1": 20, "eval/success_depth_3+": 0.1, "eval/success_depth_3+_lo": 0.03,
             "eval/success_depth_3+_hi": 0.3, "eval/episodes_depth_3+": 12}
    metrics = {**eval_metrics(0.5, 0.1), **depth}
    make_job(root, 0, ["recipe=tjpo_alfworld", "algorithm.lambda=0"], [(4, metrics)], summary={"iteration": 4,
                                                                                                 **metrics})
    make_job(root, 1, ["recipe=tjpo_alfworld", "algorithm.lambda=0.5"], [(4, eval_metrics(0.4, 0.1))],
             summary={"iteration": 4, **eval_metrics(0.4, 0.1)})
    report = build_report([read_job(p) for p in find_job_dirs([str(root)])])
    header = report.header()
    assert "success, 1-move tasks [95 %]" in header and "success, 3+-move tasks [95 %]" in header
    assert "success, 2-move tasks [95 %]" not in header  # no job logged it
    rows = report.rows()
    assert rows[0][header.index("success, 3+-move tasks [95 %]")] == "0.1000 [0.03, 0.30] (n=12)"
    assert rows[1][header.index("success, 1-move tasks [95 %]")] == "–"
