"""Checkpoints: learner state plus trainer state (iteration, sampler position, RNG states), keeping the last N.

A checkpoint is never half-visible: it is written into a hidden `.partial-iter_<n>/` folder, its files are
fsynced, `COMPLETE` is written last, and only then is the folder renamed to `iter_<n>/` (one atomic rename on the
same filesystem). A run killed while saving leaves only the hidden folder, which the next save deletes; a save that
fails (disk full) deletes it at once and raises CheckpointError naming the previous, intact checkpoint. Folders
without the marker (older layouts, hand-made copies) are still skipped with a warning.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentforge.errors import AgentforgeError
from agentforge.reliability.faultpoints import fault_point
from agentforge.reliability.object_state import load_objects, save_objects
from agentforge.reliability.safe_state import load_tensors, read_rng, save_tensors, write_rng

log = logging.getLogger("agentforge.reliability.checkpoint")

MARKER = "COMPLETE"
RNG_FILE, ALGORITHM_FILE = "rng.json", "algorithm.pt"  # read without running code (reliability/safe_state.py)
PENDING_FILE = "pending_rollouts.pt"  # asynchronous training's played batches (reliability/object_state.py)
PARTIAL = ".partial-"  # a checkpoint being written: never matched by `iter_*`
REPLACED = ".replaced-"  # a published checkpoint being replaced by a new save of the same iteration


class CheckpointError(AgentforgeError):
    """A checkpoint could not be written; the message names the previous intact one and the fix."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint written for another model or another LoRA shape: no earlier checkpoint of the run would fit
    either, so resuming stops here (instead of a torch size-mismatch traceback, or silently starting over)."""


# model config fields that decide every weight's shape; LoRA settings that decide the adapter's
SHAPE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "intermediate_size", "vocab_size", "tie_word_embeddings")
LORA_SHAPE_KEYS = ("enabled", "rank", "target_modules")


def check_learner_checkpoint(learner_dir: Path, model_path: str, lora: dict[str, Any]) -> None:
    """Raise CheckpointMismatchError naming the file and the fix when a learner checkpoint was written for another
    model architecture or another LoRA shape than this run's."""
    meta_file = learner_dir / "learner.json"
    if not meta_file.is_file():
        return  # older checkpoints: DeepSpeed's own error (wrapped by the caller) has to do
    meta = json.loads(meta_file.read_text())
    problems = []
    saved_model = _model_config(learner_dir / "hf") or _model_config(Path(str(meta.get("model_path", ""))))
    if saved_model:
        here = _model_config(Path(model_path))
        problems += [f"{key} {saved_model[key]} (checkpoint) vs {here[key]} (this run)" for key in SHAPE_KEYS
                     if key in saved_model and key in here and saved_model[key] != here[key]]
    saved_lora = meta.get("config", {}).get("lora", {})
    if saved_lora.get("enabled") or lora.get("enabled"):
        problems += [f"learner.lora.{key} {saved_lora.get(key)} (checkpoint) vs {lora.get(key)} (this run)"
                     for key in LORA_SHAPE_KEYS if _norm(saved_lora.get(key)) != _norm(lora.get(key))]
    if problems:
        raise CheckpointMismatchError(mismatch_message(meta_file, "; ".join(problems), meta.get("model_path")))


def mismatch_message(file: Path, details: str, saved_model: Any = None) -> str:
    model = f", model {saved_model}" if saved_model else ""
    return (f"{file} was written for a different model or LoRA shape than this run's: {details.rstrip('.')}. Resume "
            f"with the model and learner.lora settings of that run (its config.yaml{model}), or start a new run "
            f"(resume=false; model.init_from=<checkpoint>/learner/hf reuses full weights as a starting point)")


def _model_config(folder: Path) -> dict[str, Any]:
    config = folder / "config.json"
    if not config.is_file():
        return {}
    data = json.loads(config.read_text())
    return {key: data[key] for key in SHAPE_KEYS if key in data}


def _norm(value: Any) -> Any:
    return sorted(value) if isinstance(value, list) else value




@dataclass
class Checkpoint:
    path: Path
    iteration: int

    @property
    def learner_dir(self) -> Path:
        return self.path / "learner"

    @property
    def trainer_state(self) -> dict[str, Any]:
        return json.loads((self.path / "trainer_state.json").read_text())

    @property
    def rng(self) -> dict[str, Any] | None:
        """The RNG states (JSON); None for a checkpoint of the older pickled layout, which is not read (a pickle
        from a run dir could run code): the run resumes with fresh RNG states."""
        path = self.path / RNG_FILE
        if not path.is_file():
            if (self.path / "rng.pkl").is_file():
                log.warning("%s holds its RNG states as a pickle (an older checkpoint); not read: the resumed run "
                            "draws fresh random numbers", self.path)
            return None
        return read_rng(path)

    @property
    def pending_rollouts(self) -> list[Any]:
        """Asynchronous training: the batches played and not yet trained when the checkpoint was written."""
        path = self.path / PENDING_FILE
        if not path.is_file():
            if (self.path / "pending_rollouts.pkl").is_file():
                log.warning("%s holds its played batches as a pickle (an older checkpoint); not read: the resumed "
                            "run plays those iterations again", self.path)
            return []
        return load_objects(path)

    @property
    def algorithm_state(self) -> dict[str, Any]:
        """What the algorithm learns outside the policy (TrajEvolve's step discriminator); {} when it kept none."""
        path = self.path / ALGORITHM_FILE
        if not path.is_file():
            if (self.path / "algorithm.pkl").is_file():
                raise CheckpointError(f"{self.path} holds its algorithm state as a pickle (an older checkpoint), "
                                      "which is not read: a pickle from a run dir could run code. Resume from a "
                                      "checkpoint written by this version, or start the run again")
            return {}
        return load_tensors(path)


class CheckpointManager:
    """Writes `iter_<n>/` folders under `root`; `latest()` returns the newest complete one."""

    def __init__(self, root: Path, keep_last: int = 2) -> None:
        self.root = root
        self.keep_last = max(1, keep_last)

    def save(self, iteration: int, learner: Any, trainer_state: dict[str, Any],
             algorithm_state: dict[str, Any] | None = None, pending_rollouts: list[Any] | None = None) -> Checkpoint:
        """Write the checkpoint hidden, then publish it with one rename; on failure nothing new is visible."""
        name = f"iter_{iteration:06d}"
        final, partial = self.root / name, self.root / f"{PARTIAL}{name}"
        self.root.mkdir(parents=True, exist_ok=True)
        self.drop_partials()
        free_before = shutil.disk_usage(self.root).free
        try:
            partial.mkdir()
            learner.save(str(partial / "learner"))
            (partial / "trainer_state.json").write_text(json.dumps({"iteration": iteration, **trainer_state},
                                                                   indent=2))
            write_rng(partial / RNG_FILE)
            if algorithm_state:
                save_tensors(algorithm_state, partial / ALGORITHM_FILE)
            if pending_rollouts:
                save_objects(pending_rollouts, partial / PENDING_FILE)
            fault_point("checkpoint_write")  # tests kill the run here: every file written, nothing published
            (partial / MARKER).write_text(str(iteration))
            _fsync_tree(partial)
        except Exception as error:  # torch reports a full disk as RuntimeError ("unexpected pos"), not OSError
            free_then = shutil.disk_usage(self.root).free
            shutil.rmtree(partial, ignore_errors=True)  # give the space back (once the writer's files are closed)
            raise self._write_error(final, error, free_before, free_then) from error
        self._publish(partial, final)
        self._prune()
        return Checkpoint(final, iteration)

    def _publish(self, partial: Path, final: Path) -> None:
        if final.exists():  # the same iteration saved again (a resume from an earlier checkpoint)
            replaced = self.root / f"{REPLACED}{final.name}"
            shutil.rmtree(replaced, ignore_errors=True)
            os.rename(final, replaced)
            os.rename(partial, final)
            shutil.rmtree(replaced, ignore_errors=True)
        else:
            os.rename(partial, final)
        _fsync_dir(self.root)

    def drop_partials(self) -> list[Path]:
        """Delete checkpoints a killed or failed save left half-written (hidden, never loaded); returns them."""
        dropped = sorted([*self.root.glob(f"{PARTIAL}iter_*"), *self.root.glob(f"{REPLACED}iter_*")])
        for path in dropped:
            log.warning("deleting %s: a checkpoint whose save did not finish", path)
            shutil.rmtree(path, ignore_errors=True)
        return dropped

    def _write_error(self, final: Path, error: BaseException, free_before: int, free_then: int) -> CheckpointError:
        previous = self.latest()
        kept = (f"the previous checkpoint {previous.path} (iteration {previous.iteration}) is intact"
                if previous else "there is no earlier checkpoint")
        mib = 2**20
        full = free_then < max(16 * mib, free_before // 100) or getattr(error, "errno", None) == errno.ENOSPC
        cause = (f"the filesystem is full ({free_before / mib:.0f} MiB were free when the save started, "
                 f"{free_then / mib:.0f} when it failed)" if full else f"{free_before / mib:.0f} MiB were free")
        size = f"; a checkpoint of this run takes {_size(previous.path) / mib:.0f} MiB" if previous else ""
        return CheckpointError(
            f"could not write checkpoint {final}: {cause}{size} ({type(error).__name__}: {error}). Nothing of it "
            f"was kept and {kept}. Free some space (or lower trainer.keep_checkpoints, or move the run dir) and "
            f"continue with resume=true")

    def complete(self) -> list[Checkpoint]:
        """Complete checkpoints, oldest first; incomplete ones are reported and ignored."""
        found = []
        for path in sorted(self.root.glob("iter_*")):
            if not (path / MARKER).exists() or not (path / "trainer_state.json").exists():
                log.warning("checkpoint %s is incomplete (no %s marker): skipping it", path, MARKER)
                continue
            try:
                iteration = json.loads((path / "trainer_state.json").read_text())["iteration"]
            except (json.JSONDecodeError, KeyError) as error:
                log.warning("checkpoint %s has a corrupt trainer_state.json (%s): skipping it", path, error)
                continue
            found.append(Checkpoint(path, int(iteration)))
        return sorted(found, key=lambda c: c.iteration)

    def latest(self) -> Checkpoint | None:
        done = self.complete()
        return done[-1] if done else None

    def _prune(self) -> None:
        done = self.complete()
        for old in done[: -self.keep_last]:
            shutil.rmtree(old.path, ignore_errors=True)


def _fsync_tree(root: Path) -> None:
    """Flush every file and folder under `root` to disk before it is published (a crash then finds it whole)."""
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(folder))


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _size(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())
