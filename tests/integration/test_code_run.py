"""A training run on the code env (`recipe=grpo_code`) with the tiny model: the expert warm start runs its programs
in the real sandbox, the rollouts' `<python>` turns run there too, and the run ends with its held-out eval."""

import json

import pytest

from agentforge.commands.train import build_trainer

pytestmark = pytest.mark.integration


def test_a_code_run_warm_starts_on_sandboxed_programs_and_trains(tiny_train_config, tmp_path):
    cfg = tiny_train_config("grpo_code", "env.level=0", "trainer.tasks_per_iteration=2", "trainer.group_size=2",
                            "trainer.warm_start=true", "sft.num_tasks=4", "sft.epochs=1", "sft.batch_size=8",
                            "agent.sampling.max_new_tokens=24", "learner.lora.enabled=false", "trainer.test_tasks=0",
                            "trainer.eval_tasks=2", "held_out.reserve=16")
    trainer = build_trainer(cfg)
    trainer.fit()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # the expert's trajectories count only when its program, run in the sandbox, printed the right answer
    warm = next(r for r in rows if "sft/trajectories" in r)
    assert warm["sft/trajectories"] == 4
    trained = next(r for r in rows if "train/loss" in r)
    assert trained["train/episodes"] == 4
    assert any("eval/success_rate" in r for r in rows)
    sample = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert sample["task"]["env"] == "code" and sample["turns"][0]["observation"].startswith("Question: ")
