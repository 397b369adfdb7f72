"""The model card and the small parts of `agentforge export` / `serve` that need no model: option parsing, the
paired verdicts where a run's summary has them, episodes counted once across a resume, the hub token check."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentforge.errors import ConfigError
from agentforge.evaluation.checkpoint_source import CheckpointSource
from agentforge.export.card import episodes_trained, model_card, reproduce_command
from agentforge.export.options import dtype_name, flag, parse_args
from agentforge.export.source import ExportError, RunInfo

pytestmark = pytest.mark.unit

CONFIG = {"model": {"name": "smollm2-135m"}, "algorithm": {"name": "gigpo"}, "env": {"name": "sokoban"},
          "trainer": {"iterations": 25, "tasks_per_iteration": 8, "group_size": 8},
          "learner": {"lr": 1e-4, "lora": {"enabled": True, "rank": 16, "alpha": 32, "target_modules": ["q_proj"]}}}
ROW = {"episodes": 64, "success": 0.125, "success_interval": [0.065, 0.228], "valid_format": 0.5,
       "valid_format_interval": [0.45, 0.55], "mean_return": -0.4}


def info(tmp_path: Path, summary: dict) -> RunInfo:
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True, exist_ok=True)
    (run / ".hydra" / "overrides.yaml").write_text("- command=train\n- recipe=gigpo_sokoban\n- learner.lr=1e-4\n")
    source = CheckpointSource(kind="checkpoint", path=run / "checkpoints" / "iter_000010",
                              weights_dir=run / "checkpoints" / "iter_000010" / "learner" / "hf", iteration=10,
                              run_dir=run, base_model="/cache/smollm2", lora=True, dtype="bfloat16")
    metrics = [{"iteration": i, "train/episodes": 64} for i in range(1, 13)] + [{"iteration": 5, "train/episodes": 64}]
    return RunInfo(source, "/cache/smollm2", CONFIG, summary, metrics)


META = {"agentforge_version": "0.1.0", "how": "LoRA merged into /cache/smollm2", "dtype": "bfloat16",
        "adapter_only": False, "base_model": "/cache/smollm2", "sampling": {"temperature": 1.0},
        "algorithm": "gigpo", "env": "sokoban", "model_name": "smollm2-135m"}


def test_the_card_has_front_matter_settings_evals_and_the_paired_verdicts(tmp_path):
    paired = "success 12.5 % → 25.0 %: paired difference +12.5 points [+3.1, +21.9], beyond noise"
    floor = {"name": "random floor", "episodes": 64, "turns": 0, "success": 0.05, "success_interval": [0.01, 0.13],
             "valid_format": None, "valid_format_interval": None, "mean_return": None}
    summary = {"evals": [{"name": "model as given", **ROW}, {"name": "iteration 10", **ROW, "success": 0.25}, floor],
               "verdict": [paired, "interval overlap: within noise"],
               "verdicts": [{"text": paired, "metric": "success"}, "valid format: within noise"]}
    card = model_card(info(tmp_path, summary), META)
    front = yaml.safe_load(card.split("---")[1])
    assert front["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and "gigpo" in front["tags"]
    assert "| recipe | `gigpo_sokoban` |" in card and "| iterations trained | 10 of 25 |" in card
    assert "| episodes trained | 640 |" in card  # iterations 1-10, the resumed iteration 5 once
    assert "| model as given | 64 | 12.5% [6.5%, 22.8%] |" in card and "| iteration 10 | 64 | 25.0%" in card
    assert "| random floor | 64 | 5.0% [1.0%, 13.0%] | – | – |" in card  # a row without format or return
    verdicts = [line for line in card.split("## Evaluation")[1].splitlines() if line.startswith("- ")]
    assert verdicts == [f"- {paired}", "- valid format: within noise", "- interval overlap: within noise"]
    assert "agentforge train recipe=gigpo_sokoban learner.lr=1e-4" in card
    assert "| `learner.lora` | rank 16, alpha 32, q_proj |" in card


def test_without_verdicts_or_evals_the_card_says_less_not_wrong(tmp_path):
    card = model_card(info(tmp_path, {"evals": [{"name": "iteration 0", **ROW}], "verdict": ["a → b: within"]}),
                      META)
    assert "- a → b: within" in card
    bare = model_card(info(tmp_path, {}), META)
    assert "## Evaluation" not in bare and "## Reproduce" in bare


def test_counting_and_commands():
    assert episodes_trained([], 3) is None
    assert episodes_trained([{"iteration": 1, "train/episodes": 4}, {"iteration": 2, "train/episodes": 4}], 1) == 4
    assert reproduce_command(None) is None


def test_options_are_checked_by_name():
    assert parse_args(["run", "out=x", "dtype=bf16"], {"out": "", "dtype": ""}, "export") == (
        "run", {"out": "x", "dtype": "bf16"})
    with pytest.raises(ConfigError, match="unknown option 'ot'; valid options: out=, dtype="):
        parse_args(["run", "ot=x"], {"out": "", "dtype": ""}, "export")
    with pytest.raises(ConfigError, match="takes one path"):
        parse_args(["a", "b"], {}, "serve")
    assert dtype_name("fp16", "float32") == "float16" and dtype_name(None, "float32") == "float32"
    with pytest.raises(ConfigError, match="valid dtypes"):
        dtype_name("int4", "float32")
    assert flag({"a": "true"}, "a") and not flag({}, "a")
    with pytest.raises(ConfigError, match="expected true or false"):
        flag({"a": "maybe"}, "a")


def test_the_hub_push_needs_a_token_and_a_repo_name(monkeypatch, tmp_path):
    from agentforge.export.hub import check_token

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    with pytest.raises(ExportError, match="no Hugging Face token found"):
        check_token("me/agent")
    with pytest.raises(ExportError, match="expected <user or organisation>/<name>"):
        check_token("agent")
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    assert check_token("me/agent") == "hf_x"
