"""A mixed-env training run on the tiny model (`recipe=grpo_mix`, Sokoban + search QA), played in conversation
mode: tasks of both envs by weight, an expert warm start on both, and each env's own held-out eval."""

import json

import pytest

from agentforge.commands.train import build_trainer

pytestmark = pytest.mark.integration


def test_a_mixed_run_trains_on_both_envs_and_evaluates_each(tiny_train_config, tmp_path):
    cfg = tiny_train_config("grpo_mix", "trainer.tasks_per_iteration=4", "trainer.group_size=2",
                            "trainer.warm_start=true", "sft.num_tasks=4", "sft.epochs=1", "sft.batch_size=8",
                            "agent.history=conversation", "agent.sampling.max_new_tokens=12",
                            "learner.lora.enabled=false", "trainer.eval_before=true")
    trainer = build_trainer(cfg)
    trainer.fit()
    # weights 1:1: two tasks of each env trained (below); an env's count is the seeds it used, held-out rooms
    # skipped on the way included
    assert set(trainer.sampler.counts) == {"sokoban", "search_qa"}
    assert all(count >= 2 for count in trainer.sampler.counts.values())
    assert {t.env for t in trainer.eval_tasks} == {"sokoban", "search_qa"}
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/success_rate" in r]
    assert len(evals) == 2  # before training and after the iteration
    for row in evals:
        for env in ("sokoban", "search_qa"):
            assert 0.0 <= row[f"eval/{env}/success"] <= 1.0
            assert row[f"eval/{env}/episodes"] == 2
    trained = next(r for r in rows if "train/loss" in r)
    assert trained["train/sokoban/episodes"] == 4 and trained["train/search_qa/episodes"] == 4
    assert "train/truncated_turn_rate" in trained
