"""A learner rank's checkpoint: DeepSpeed state (weights, optimizer, LR scheduler), an HF export, the KL reference
when a warm start moved it, the critic's state, and a COMPLETE marker written last (complete-or-absent). `rank` is a
`DeepSpeedLearnerRank` (not imported here: it imports this module)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from agentforge.errors import AgentforgeError

COMPLETE_MARKER = "COMPLETE"
REFERENCE_FILE = "reference.safetensors"  # the KL reference when a warm start moved it (full model or adapter)
CHECKPOINT_TAG = "state"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "chat_template.jinja", "generation_config.json")


def save_rank(rank: Any, path: str | os.PathLike[str]) -> None:
    """DeepSpeed state (weights, optimizer, LR scheduler) in `path/deepspeed`, an HF export in `path/hf`
    (the adapter with LoRA, else the full model plus tokenizer files), and `path/COMPLETE` written last."""
    path = Path(path)
    marker = path / COMPLETE_MARKER
    if rank.rank == 0:
        path.mkdir(parents=True, exist_ok=True)
        marker.unlink(missing_ok=True)
    rank._barrier()
    rank.engine.save_checkpoint(str(path / "deepspeed"), tag=CHECKPOINT_TAG,
                                client_state={"learner_steps": rank.steps},
                                exclude_frozen_parameters=rank.config.lora.enabled)
    _save_hf(rank, path / "hf")
    if rank.critic is not None:
        rank.critic.save(path, exclude_frozen=rank.config.critic.uses_lora(rank.config))
    if rank.rank == 0 and rank.reference_moved:  # the reference is no longer the model as loaded: keep it
        from safetensors.torch import save_file

        save_file({n: t.contiguous() for n, t in rank.reference_state().items()}, str(path / REFERENCE_FILE))
    rank._barrier()
    if rank.rank == 0:
        meta = {"model_path": rank.model_path, "steps": rank.steps, "world_size": rank.world_size,
                "reference": REFERENCE_FILE if rank.reference_moved else None, "config": rank.config.to_dict()}
        (path / "learner.json").write_text(json.dumps(meta, indent=2, default=str))
        marker.write_text(f"steps={rank.steps}\n")
    rank._barrier()


def _save_hf(rank: Any, out: Path) -> None:
    module = rank.engine.module
    state = rank.engine._zero3_consolidated_16bit_state_dict() if rank.config.zero_stage == 3 else None
    if rank.rank != 0:
        return
    if state is not None:
        module.save_pretrained(out, state_dict=state)
    else:
        module.save_pretrained(out)
    if not rank.config.lora.enabled:
        for name in TOKENIZER_FILES:
            source = Path(rank.model_path) / name
            if source.is_file():
                shutil.copy2(source, out / name)


def load_rank(rank: Any, path: str | os.PathLike[str]) -> None:
    """Restore weights, optimizer and LR scheduler from a checkpoint written by `save` (same world size)."""
    path = Path(path)
    if not (path / COMPLETE_MARKER).is_file():
        raise AgentforgeError(f"{path} is not a complete learner checkpoint (no {COMPLETE_MARKER} marker): "
                              "saving was interrupted or the path is wrong; resume from an earlier checkpoint")
    from agentforge.reliability.checkpoint import (
        CheckpointMismatchError,
        check_learner_checkpoint,
        mismatch_message,
    )

    check_learner_checkpoint(path, rank.model_path, rank.config.to_dict()["lora"])
    try:
        load_path, client = rank.engine.load_checkpoint(
            str(path / "deepspeed"), tag=CHECKPOINT_TAG, load_module_strict=not rank.config.lora.enabled,
            load_optimizer_states=True, load_lr_scheduler_states=True)
    except RuntimeError as error:  # what the metadata check could not see: torch's size-mismatch traceback
        if "size mismatch" not in str(error) and "Missing key" not in str(error):
            raise
        first = str(error).strip().splitlines()[1:2] or [str(error)[:200]]
        raise CheckpointMismatchError(mismatch_message(path / "deepspeed", first[0].strip())
                                      ) from error
    if load_path is None:
        raise AgentforgeError(f"DeepSpeed found no state under {path / 'deepspeed'}; the checkpoint is damaged")
    rank.steps = int((client or {}).get("learner_steps", 0))
    if rank.critic is not None:
        rank.critic.load(path, strict=not rank.config.critic.uses_lora(rank.config))
    if (path / REFERENCE_FILE).is_file() and rank.config.needs_reference():
        from safetensors.torch import load_file

        rank.load_reference_state(load_file(str(path / REFERENCE_FILE)))
