"""A disk that fills up while a checkpoint is written: the save fails with an error naming the intact previous
checkpoint, nothing half-written stays visible (or takes space), and the previous checkpoint loads.

The disk is a real tmpfs of 80 MiB (one tiny-model checkpoint is 53 MB, the second does not fit): the writes fail
with the kernel's own ENOSPC inside torch/DeepSpeed, as on a full disk. Needs mount rights (root); skipped without.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentforge.commands.train import build_trainer
from agentforge.reliability.checkpoint import MARKER, CheckpointError, CheckpointManager
from agentforge.schema.compose import compose_config

pytestmark = pytest.mark.integration

DISK_MB = 80
RUN = ["recipe=debug", "command=train", "engine=hf", "logger.wandb=false", "env_pool.kind=local",
       "trainer.tasks_per_iteration=1", "trainer.group_size=2", "trainer.eval_before=false", "trainer.eval_every=0",
       "trainer.checkpoint_every=1", "agent.max_turns=1", "agent.sampling.max_new_tokens=8"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({made.stderr.strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_while_saving_leaves_the_previous_checkpoint_usable(tmp_path, small_disk):
    run_dir = small_disk / "run"
    overrides = [*RUN, f"run_dir={run_dir}"]
    trainer = build_trainer(compose_config([*overrides, "trainer.iterations=2"], run_dir=str(run_dir)))
    with pytest.raises(CheckpointError) as caught:
        trainer.fit()
    message = str(caught.value)
    assert "could not write checkpoint" in message and "iter_000002" in message
    assert "iter_000001 (iteration 1) is intact" in message and "the filesystem is full" in message, message

    root = run_dir / "checkpoints"
    assert [p.name for p in root.iterdir()] == ["iter_000001"], "a half-written checkpoint is visible or left over"
    assert (root / "iter_000001" / MARKER).is_file()
    assert CheckpointManager(root).latest().iteration == 1

    # the previous checkpoint loads: weights, optimizer, sampler and RNG states
    resumed = build_trainer(compose_config([*overrides, "trainer.iterations=2", f"resume={run_dir}"],
                                     run_dir=str(tmp_path / "ignored")))
    try:
        resumed._restore()
        assert resumed.start_iteration == 1 and resumed.learner.rank0.steps == 1
    finally:
        resumed.close()
