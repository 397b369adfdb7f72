"""`agentforge eval` on checkpoints of a real tiny training run (shared with test_sweep_report.py): it samples exactly
what the trainer sampled with the same weights and settings, adds decoding baselines, and rejects bad input."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch
from test_sweep_report import TINY_TRAIN, run_cli, tiny_sweep

from agentforge.commands.evaluate import run_eval
from agentforge.errors import ConfigError
from agentforge.schema.compose import compose_config
from agentforge.tasks import iteration_seed

pytestmark = pytest.mark.integration

EVAL = ["command=eval", *TINY_TRAIN]
# the trainer's eval settings in test_sweep_report.TRAINER
TRAINER_EVAL = ["eval.num_tasks=2", "eval.samples_per_task=2", "eval.temperature=0.4"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """The λ = 0 job of the shared sweep: a finished run with checkpoints after iterations 1 and 2."""
    return tiny_sweep(tmp_path_factory) / "0"


def evaluate(tmp_path: Path, *overrides: str) -> dict:
    return run_eval(compose_config([*EVAL, *overrides], run_dir=str(tmp_path)))


def responses(path: Path) -> list[list[str]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [[turn["response_text"] for turn in line["turns"]] for line in lines]


def test_eval_command_reproduces_the_trainers_final_eval_and_adds_baseline_rows(run, tmp_path):
    out = tmp_path / "eval"
    done = run_cli("eval", *TINY_TRAIN, f"checkpoint={run}", *TRAINER_EVAL, "eval.baselines=[pp,rp]",
                   f"hydra.run.dir={out}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads((out / "eval.json").read_text())
    assert report["checkpoint"]["iteration"] == 2 and report["checkpoint"]["run_dir"] == str(run)
    # the run's held-out eval tasks, distinct by content; how many its run trained on is measured from its record
    assert report["tasks"]["trained_on"] == 0 and report["tasks"]["held_out"]["keyed_by_content"]
    assert "held-out eval: 2 tasks, 0 of them trained on by the checkpoint's run" in done.stderr
    names = [row["name"] for row in report["rows"]]
    assert names[0].startswith("TJPO (spatial_coverage") and names[1:] == [f"{names[0]}+PP", f"{names[0]}+RP",
                                                                           "random floor"]
    floor = report["rows"][-1]
    assert floor["metrics"]["episodes"] == 4 and sorted(floor["outcomes"]) == sorted(report["rows"][0]["outcomes"])
    assert report["rows"][1]["sampling"]["presence_penalty"] == 0.5
    assert report["rows"][2]["sampling"]["repetition_penalty"] == 1.05
    assert report["descriptors"] == ["direction_transition", "spatial_coverage"]  # cross-metric: all of the env's

    logged = json.loads((run / "summary.json").read_text())["after"]
    main = report["rows"][0]["metrics"]
    for key in ("episodes", "success_rate", "mean_return", "mean_turns", "invalid_action_rate", "generated_tokens",
                "div_groups/spatial_coverage"):
        assert main[key] == logged[f"eval/{key}"], key
    for row in report["rows"][1:-1]:
        assert row["metrics"]["episodes"] == 4 and "div_pair/direction_transition" in row["metrics"]
    markdown = (out / "eval.md").read_text()
    assert markdown.count(f"| {names[0]}") == 3 and "(×10⁻³)" in markdown and "| random floor" in markdown
    assert len(responses(out / "trajectories.jsonl")) == 4
    assert "Success" in done.stderr  # the console table


def test_a_checkpoint_replays_the_training_rollout_its_weights_played(run, tmp_path):
    """iter_1's weights played iteration 2's rollout (the run's 3rd and 4th training tasks: held-out rooms skipped,
    seed iteration_seed(0, 1), temperature 1): evaluating iter_1 with those settings must give the same text, token
    for token."""
    with gzip.open(run / "trajectories" / "iter_00002.jsonl.gz", "rt") as f:
        first = min(json.loads(line)["task"]["seed"] for line in f)
    replay = ["eval.split=train", f"eval.seed_offset={first}", "eval.num_tasks=2", "eval.samples_per_task=2",
              "eval.temperature=1.0", f"eval.seed={iteration_seed(0, 1)}"]
    logged = [[turn["response_text"] for turn in json.loads(line)["turns"]]
              for line in (run / "samples.jsonl").read_text().splitlines() if json.loads(line)["iteration"] == 2]
    assert len(logged) == 2

    evaluate(tmp_path / "ckpt", f"checkpoint={run}/checkpoints/iter_000001", *replay)
    assert responses(tmp_path / "ckpt" / "trajectories.jsonl")[:2] == logged
    # the same weights as an HF model dir (the learner's full-weight export) give the same rollouts
    evaluate(tmp_path / "hf", f"checkpoint={run}/checkpoints/iter_000001/learner/hf", *replay)
    assert responses(tmp_path / "hf" / "trajectories.jsonl")[:2] == logged
    # the model as shipped plays differently: the checkpoint's weights were really loaded
    base = evaluate(tmp_path / "base", "checkpoint=null", *replay)
    assert responses(tmp_path / "base" / "trajectories.jsonl")[:2] != logged
    # compare=base swaps the shipped weights into the same engine: the same tasks and seed play what a fresh engine
    # on the shipped model played, and the two rows are paired task by task
    report = evaluate(tmp_path / "compare", f"checkpoint={run}/checkpoints/iter_000001", "compare=base", *replay)
    compared = next(row for row in report["rows"] if row["name"] == "base (as shipped)")
    for key in ("generated_tokens", "success_rate", "mean_return", "mean_turns"):
        assert compared["metrics"][key] == base["rows"][0]["metrics"][key], key
    assert compared["outcomes"] == base["rows"][0]["outcomes"]
    comparison = report["comparison"]
    assert comparison["tasks"] == 2 and comparison["method"] == "paired task bootstrap"  # 2 episodes per task
    assert comparison["from"] == "base (as shipped)" and "success" in comparison["text"]
    assert "Paired comparison" in (tmp_path / "compare" / "eval.md").read_text()


def test_bad_input_fails_before_start_up_with_a_clear_error(run, tmp_path):
    cases = [
        (["checkpoint=/no/such/run"], "no such file or directory; expected a train run dir"),
        ([f"checkpoint={tmp_path}"], "not a run, checkpoint or model dir"),
        ([f"checkpoint={run}", "eval.baselines=[pp,nucleus]"], r"unknown eval baseline\(s\) \['nucleus'\]; valid "
                                                                "baselines: pp, rp"),
        ([f"checkpoint={run}", "eval.descriptors=[spatial_coverage,nope]"], "valid descriptors: .*spatial"),
        ([f"checkpoint={run}", "eval.interventions=true"], "use an ALFWorld recipe"),
    ]
    for overrides, message in cases:
        with pytest.raises(ConfigError, match=message):
            evaluate(tmp_path / "x", *overrides)
    partial = tmp_path / "partial"
    shutil.copytree(run / "checkpoints" / "iter_000002", partial)
    (partial / "COMPLETE").unlink()
    with pytest.raises(ConfigError, match="incomplete"):
        evaluate(tmp_path / "x", f"checkpoint={partial}")
    with pytest.raises(ConfigError, match="does not fit the recipe's model"):
        evaluate(tmp_path / "x", f"checkpoint={run}", "model.num_layers=3")
    done = run_cli("eval", "recipe=debug", "checkpoint=/no/such/run", cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "agentforge: config error: checkpoint=/no/such/run: no such file" in done.stderr


def test_a_lora_checkpoint_loads_as_the_learners_merged_export(tiny_model_dir, tmp_path):
    """LoRA checkpoints hold only the adapter: eval merges it onto the recorded base exactly as the learner exports."""
    from agentforge.evaluation.checkpoint_source import load_checkpoint_weights, resolve_checkpoint
    from agentforge.learner import Learner, LearnerConfig
    from agentforge.reliability.checkpoint import CheckpointManager

    config = LearnerConfig.from_mapping({"lr": 1e-3, "lora": {"enabled": True}})
    with Learner(str(tiny_model_dir), config, in_process=True) as learner:
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():  # a trained adapter: B is zero at init, which would make the merge a no-op
            for name, param in learner.rank0.engine.module.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
        CheckpointManager(tmp_path / "run" / "checkpoints").save(3, learner, {"sampler": {"position": 0}})
        expected = dict(learner.export_weights())
    source = resolve_checkpoint(tmp_path / "run")
    assert source.lora and source.iteration == 3 and source.base_model == str(tiny_model_dir)
    loaded = dict(load_checkpoint_weights(source, fallback_base="unused"))
    assert sorted(loaded) == sorted(expected)
    base = dict(_base_weights(tiny_model_dir))
    changed = [n for n in expected if not torch.equal(expected[n], base[n])]
    assert len(changed) == 8  # q, k, v, o of both layers
    for name, tensor in expected.items():
        assert torch.equal(loaded[name], tensor), name


def _base_weights(model_dir: Path) -> list[tuple[str, torch.Tensor]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return [(n, p.detach()) for n, p in model.named_parameters()]



def test_interventions_play_each_case_under_the_three_conditions(tmp_path):
    """The ALFWorld intervention table's plumbing on one bundled case (the tiny model wins nothing: the accounting
    of wins is unit-tested; here: every condition plays the case, and User Constraints shows its instruction)."""
    pytest.importorskip("textworld")
    pytest.importorskip("alfworld")
    from agentforge.envs.alfworld.intervention_cases import BUNDLED_CASES, load_cases, write_cases

    if not BUNDLED_CASES.exists():
        pytest.skip("no bundled intervention cases; envs/build_alfworld_interventions.py builds them")
    case = load_cases("bundled")[0]
    write_cases([case], tmp_path / "one_case.jsonl.gz")
    report = evaluate(tmp_path / "iv", "env=alfworld", "checkpoint=null", "agent.max_turns=1", "eval.num_tasks=1",
                      "eval.samples_per_task=1", "eval.interventions=true",
                      f"eval.intervention_cases={tmp_path / 'one_case.jsonl.gz'}")
    assert report["descriptors"] == ["action_type", "location"]  # ALFWorld's; the sokoban one optimised is not
    interventions = report["interventions"]
    assert interventions["num_cases"] == 1 and interventions["episodes_per_condition"] == 1
    assert set(interventions["success_rate"]) == {"standard", "user_constraint", "disruption"}
    first_observation = {}
    for condition in interventions["success_rate"]:
        played = [json.loads(line) for line in (tmp_path / "iv" / f"trajectories_{condition}.jsonl").read_text()
                  .splitlines()]
        assert len(played) == 1 and played[0]["task"]["env"] == "alfworld_intervention"
        first_observation[condition] = played[0]["turns"][0]["observation"]
    instruction = f"avoid locations of type {case.category}"
    assert instruction in first_observation["user_constraint"]
    assert instruction not in first_observation["standard"] and instruction not in first_observation["disruption"]
    assert "User Constraints" in (tmp_path / "iv" / "eval.md").read_text()
