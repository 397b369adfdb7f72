"""`agentforge eval` without a model: settings, descriptor choice, checkpoint resolution, metrics and tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from agentforge.errors import ConfigError
from agentforge.evaluation.checkpoint_source import resolve_checkpoint
from agentforge.evaluation.evaluator import resolve_descriptors, row_metrics
from agentforge.evaluation.report import eval_markdown, eval_table, finite_or_none
from agentforge.evaluation.settings import EvalSettings, baseline_sampling
from agentforge.rollout.workflow import RolloutStats
from agentforge.types import Group, SamplingConfig, Task, Trajectory, Turn

pytestmark = pytest.mark.unit


def trajectory(task: Task, index: int, moves: list[str], won: bool, invalid: int = 0) -> Trajectory:
    turns = [Turn(prompt_ids=[1], response_ids=[2], logprobs=[0.0], forced_mask=[False], response_text=m, action=m,
                  valid=i >= invalid, reward=-0.1, env_reward=-0.1, anchor="grid", observation="grid")
             for i, m in enumerate(moves)]
    return Trajectory(task=task, rollout_index=index, turns=turns, won=won)


def groups() -> list[Group]:
    """Task 0: three wins whose direction-transition vectors are one-hot on up→up, up→down and up→up (plus a loss);
    task 1: a single win, which contributes no diversity value."""
    t0, t1 = Task("sokoban", 1), Task("sokoban", 2)
    first = [trajectory(t0, 0, ["up", "up"], True), trajectory(t0, 1, ["up", "down"], True),
             trajectory(t0, 2, ["up", "up"], True), trajectory(t0, 3, ["left", "right", "left"], False, invalid=1)]
    second = [trajectory(t1, 0, ["down", "down", "down", "down"], True), trajectory(t1, 1, ["up"], False)]
    return [Group(t0, first), Group(t1, second)]


def test_row_metrics_match_a_hand_computation():
    metrics = row_metrics(groups(), RolloutStats(), ["direction_transition"])
    assert metrics["success_rate"] == pytest.approx(4 / 6)
    assert metrics["mean_success_length"] == pytest.approx((2 + 2 + 2 + 4) / 4)
    assert metrics["invalid_action_rate"] == pytest.approx(1 / 14)
    # one-hot vectors: distances √2, 0, √2 between the three successful ones of task 0; task 1 has one success
    assert metrics["div_pair/direction_transition"] == pytest.approx(2 * math.sqrt(2) / 3)
    assert metrics["div_groups/direction_transition"] == 1
    k = math.exp(-2 / 200)  # RBF kernel between two one-hot vectors at σ = 10
    gram = np.array([[1, k, 1], [k, 1, k], [1, k, 1]]) + 1e-4 * np.eye(3)
    assert metrics["div_dpp/direction_transition"] == pytest.approx(np.linalg.det(gram) ** (1 / 3))


def test_no_success_gives_undefined_length_and_diversity_not_zero():
    failed = [Group(g.task, [t for t in g.trajectories if not t.won]) for g in groups()]
    metrics = row_metrics(failed, RolloutStats(), ["direction_transition"])
    assert math.isnan(metrics["mean_success_length"]) and math.isnan(metrics["div_pair/direction_transition"])
    assert finite_or_none(metrics)["div_pair/direction_transition"] is None  # JSON gets null
    assert metrics["div_groups/direction_transition"] == 0


def report(metrics: dict) -> dict:
    return {"env": "sokoban", "tasks": {"num_tasks": 2, "split": "eval"}, "samples_per_task": 4, "temperature": 0.4,
            "descriptors": ["direction_transition"], "rows": [{"name": "GiGPO", "metrics": metrics}],
            "checkpoint": None, "interventions": None}


def test_tables_show_dpp_in_thousandths_and_dashes_for_undefined_values():
    metrics = {"success_rate": 0.5, "mean_return": 1.0, "mean_turns": 3.5, "mean_success_length": math.nan,
               "invalid_action_rate": 0.0, "tokens_per_success": 42.25, "think_tokens_per_turn": 9.0,
               "div_pair/direction_transition": 0.0781, "div_dpp/direction_transition": 0.004100,
               "div_groups/direction_transition": 3.0}
    markdown = eval_markdown(report(metrics))
    header, rule, row = markdown.splitlines()[2:5]
    assert "D^dpp direction_transition (×10⁻³)" in header and rule.startswith("|---|---:")
    assert row == "| GiGPO | 0.5000 | 1.000 | 3.50 | – | 42.2 | 9.0 | 0.000 | 0.0781 | 4.100 | 3 |"
    assert "Redundant" not in header  # an optional column: only where a row has the metric
    table = eval_table(report(metrics))
    assert [c.header for c in table.columns] == ["metric", "GiGPO"]
    header = eval_markdown(report({**metrics, "trajevolve/redundant_step_fraction": 0.25})).splitlines()[2]
    assert "| Invalid | Redundant | D^pair" in header


def test_success_carries_its_95_percent_interval_when_the_episodes_are_known():
    metrics = {"success_rate": 0.625, "episodes": 32, "mean_return": 1.0}
    header, _, row = eval_markdown(report(metrics)).splitlines()[2:5]
    assert "Success [95 %]" in header
    assert "| GiGPO | 0.6250 [0.45, 0.77] |" in row  # Wilson over 32 episodes (the demo checkpoint's eval)


def test_settings_reject_unknown_baselines_options_and_splits():
    with pytest.raises(ConfigError, match="valid baselines: pp, rp"):
        EvalSettings.from_config({"baselines": ["pp", "topk"]})
    with pytest.raises(ConfigError, match="unknown eval option"):
        EvalSettings.from_config({"num_task": 3})
    with pytest.raises(ConfigError, match="valid splits"):
        EvalSettings.from_config({"split": "dev"})
    settings = EvalSettings.from_config({"baselines": "rp", "repetition_penalty": 1.1})
    assert settings.baselines == ["rp"]
    sampling = baseline_sampling(SamplingConfig(temperature=0.4), "rp", settings)
    assert (sampling.repetition_penalty, sampling.presence_penalty, sampling.temperature) == (1.1, 0.0, 0.4)
    assert baseline_sampling(SamplingConfig(), "pp", settings).presence_penalty == 0.5


def test_auto_descriptors_are_the_envs_builtins_plus_the_optimised_one():
    assert resolve_descriptors("auto", "sokoban") == ["direction_transition", "spatial_coverage"]
    assert resolve_descriptors("auto", "alfworld_intervention") == ["action_type", "location"]
    assert resolve_descriptors("auto", "sokoban", "json:dumps")[-1] == "json:dumps"  # a user's dotted path
    assert resolve_descriptors(["location"], "sokoban") == ["location"]
    with pytest.raises(ConfigError, match="direction_transition"):
        resolve_descriptors(["nope"], "sokoban")


def test_checkpoint_paths_resolve_or_say_what_was_expected(tmp_path):
    assert resolve_checkpoint(None) is None and resolve_checkpoint("null") is None
    with pytest.raises(ConfigError, match="no such file.*train run dir"):
        resolve_checkpoint(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        resolve_checkpoint(tmp_path / "notes.txt")
    with pytest.raises(ConfigError, match="not a run, checkpoint or model dir"):
        resolve_checkpoint(tmp_path)

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(ConfigError, match="without a complete checkpoint"):
        resolve_checkpoint(run)
    for iteration in (5, 10):
        hf = run / "checkpoints" / f"iter_{iteration:06d}" / "learner" / "hf"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text("{}")
        (hf.parent / "learner.json").write_text(json.dumps({"model_path": "/base", "config": {"dtype": "bfloat16"}}))
        (hf.parent.parent / "trainer_state.json").write_text(json.dumps({"iteration": iteration}))
        (hf.parent.parent / "COMPLETE").write_text(str(iteration))
    (run / "checkpoints" / "iter_000010" / "COMPLETE").unlink()  # interrupted while saving
    source = resolve_checkpoint(run)
    assert (source.kind, source.iteration, source.lora, source.dtype) == ("checkpoint", 5, False, "bfloat16")
    assert source.run_dir == run and source.base_model == "/base"
    with pytest.raises(ConfigError, match="incomplete"):
        resolve_checkpoint(run / "checkpoints" / "iter_000010")
    assert resolve_checkpoint(run / "checkpoints" / "iter_000005" / "learner").iteration == 5
    assert resolve_checkpoint(run / "checkpoints" / "iter_000005" / "learner" / "hf").kind == "model"

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ConfigError, match="bare LoRA adapter"):
        resolve_checkpoint(adapter)


def test_intervention_summary_counts_compliant_wins_per_condition():
    from agentforge.evaluation.interventions import condition_summary

    task = Task("alfworld_intervention", 0, "test")

    def played(won: bool, visit: bool, rejected: bool = False) -> Trajectory:
        turn = Turn(prompt_ids=[1], response_ids=[2], logprobs=[0.0], forced_mask=[False], response_text="",
                    action="go to countertop 1", valid=True, reward=0.0, env_reward=0.0, anchor="a", observation="o",
                    info={"forbidden_visit": visit, "rejected": rejected})
        return Trajectory(task=task, rollout_index=0, turns=[turn, turn], won=won)

    group = [Group(task, [played(True, True), played(True, False), played(False, True), played(False, False, True)])]
    constrained = condition_summary(group, "user_constraint")
    assert constrained["success_rate"] == 0.25 and constrained["win_rate"] == 0.5  # a win with a visit is no success
    assert constrained["forbidden_visit_rate"] == 0.5 and constrained["rejected_rate"] == 0.25
    assert condition_summary(group, "disruption")["success_rate"] == 0.5  # disruption counts every win
