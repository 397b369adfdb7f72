"""Checkpoints: learner state plus trainer state (iteration, sampler position, RNG states), keeping the last N.

A checkpoint is complete only when its `COMPLETE` marker exists (written last); a partial or corrupt one is skipped
with a warning and the previous one is used.
"""

from __future__ import annotations

import json
import logging
import pickle
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger("agentforge.training.checkpoint")

MARKER = "COMPLETE"


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


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
    def rng(self) -> dict[str, Any]:
        with (self.path / "rng.pkl").open("rb") as f:
            return pickle.load(f)


class CheckpointManager:
    """Writes `iter_<n>/` folders under `root`; `latest()` returns the newest complete one."""

    def __init__(self, root: Path, keep_last: int = 2) -> None:
        self.root = root
        self.keep_last = max(1, keep_last)

    def save(self, iteration: int, learner: Any, trainer_state: dict[str, Any]) -> Checkpoint:
        path = self.root / f"iter_{iteration:06d}"
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        learner.save(str(path / "learner"))
        (path / "trainer_state.json").write_text(json.dumps({"iteration": iteration, **trainer_state}, indent=2))
        with (path / "rng.pkl").open("wb") as f:
            pickle.dump(rng_state(), f)
        (path / MARKER).write_text(str(iteration))
        self._prune()
        return Checkpoint(path, iteration)

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
