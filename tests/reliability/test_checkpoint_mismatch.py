"""A checkpoint given to a run it does not fit (another model, another LoRA shape): resuming stops with an error
naming the file and the fix, instead of a torch size-mismatch traceback or a silent start from scratch."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from agentforge.commands.train import build_trainer
from agentforge.reliability.checkpoint import CheckpointMismatchError
from agentforge.schema.compose import compose_config

pytestmark = pytest.mark.integration

RUN = ["recipe=debug", "command=train", "engine=hf", "logger.wandb=false", "env_pool.kind=local",
       "trainer.tasks_per_iteration=2", "trainer.group_size=2", "trainer.eval_before=false", "trainer.eval_every=0",
       "trainer.checkpoint_every=1", "trainer.iterations=1", "agent.max_turns=1", "agent.sampling.max_new_tokens=8"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny run (full weights, no LoRA) with a checkpoint at iteration 1."""
    run = tmp_path_factory.mktemp("mismatch") / "run"
    build_trainer(compose_config(RUN, run_dir=str(run))).fit()
    return run


def resume(run: Path, tmp_path: Path, *overrides: str) -> None:
    trainer = build_trainer(compose_config([*RUN, "trainer.iterations=2", f"resume={run}", *overrides],
                                     run_dir=str(tmp_path / "ignored")))
    try:
        trainer._restore()
    finally:
        trainer.close()


@pytest.mark.parametrize(("overrides", "named"), [
    (["learner.lora.enabled=true"], "learner.lora.enabled False (checkpoint) vs True (this run)"),
    (["model.hidden_size=32"], "hidden_size 64 (checkpoint) vs 32 (this run)"),
])
def test_a_checkpoint_of_another_shape_is_refused_with_the_file_and_the_fix(run_dir, tmp_path, overrides, named):
    with pytest.raises(CheckpointMismatchError) as caught:
        resume(run_dir, tmp_path, *overrides)
    message = str(caught.value)
    assert "iter_000001/learner/learner.json was written for a different model or LoRA shape" in message
    assert named in message and "resume=false" in message and "config.yaml" in message


def test_without_its_metadata_the_size_mismatch_is_still_named(run_dir, tmp_path):
    """An older or hand-copied checkpoint without learner.json: DeepSpeed's own size mismatch, named and explained."""
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    learner = copy / "checkpoints" / "iter_000001" / "learner"
    (learner / "learner.json").unlink()
    (learner / "hf" / "config.json").unlink()
    with pytest.raises(CheckpointMismatchError) as caught:
        resume(copy, tmp_path, "model.hidden_size=32")
    message = str(caught.value)
    assert re.search(r"learner/deepspeed was written for a different model or LoRA shape than this run's: "
                     r"size mismatch for model\.embed_tokens\.weight", message)
    assert "Traceback" not in message
