"""Resume and eval cannot run code from a run dir (issue 57, item 2): checkpoint state is JSON, tensors read with
torch's weights_only loader, or agentforge's own dataclasses through an allowlist unpickler; a crafted pickle is
refused without running; resume takes only run dirs this user owns that agentforge wrote."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from agentforge.errors import ConfigError
from agentforge.reliability.safe_state import (
    UnsafeStateError,
    load_tensors,
    read_rng,
    safe_load_pickle,
    save_tensors,
    set_rng_state,
    write_rng,
)
from agentforge.types import Task, Trajectory, Turn

pytestmark = pytest.mark.unit


class Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def draws() -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_rng_states_round_trip_through_json(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    draws()
    write_rng(tmp_path / "rng.json")
    expected = draws()
    draws()
    set_rng_state(read_rng(tmp_path / "rng.json"))
    assert draws() == expected


def test_agentforge_dataclasses_load_and_a_crafted_pickle_never_runs(tmp_path):
    trajectory = Trajectory(task=Task("sokoban", 7), rollout_index=1)
    trajectory.turns.append(Turn(prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.5], forced_mask=[False],
                                 response_text="up", action="up", valid=True, reward=1.0, env_reward=1.0, anchor="a",
                                 observation="room"))
    (tmp_path / "pending.pkl").write_bytes(pickle.dumps([{"iteration": 3, "played": trajectory}]))
    loaded = safe_load_pickle(tmp_path / "pending.pkl")
    assert loaded[0]["played"].task == Task("sokoban", 7) and loaded[0]["played"].turns[0].response_ids == [3]
    marker = tmp_path / "ran"
    (tmp_path / "crafted.pkl").write_bytes(pickle.dumps([Exploit(marker)]))
    with pytest.raises(UnsafeStateError, match="posix.system|os.system"):
        safe_load_pickle(tmp_path / "crafted.pkl")
    assert not marker.exists()


def test_algorithm_state_holds_arrays_and_tensors_and_refuses_code(tmp_path):
    state = {"discriminator": {"weights": np.arange(6.0).reshape(2, 3), "x": np.zeros((0, 0)), "y": None},
             "t": torch.ones(2)}
    save_tensors(state, tmp_path / "algorithm.pt")
    loaded = load_tensors(tmp_path / "algorithm.pt")
    assert np.array_equal(loaded["discriminator"]["weights"], state["discriminator"]["weights"])
    assert loaded["discriminator"]["y"] is None and torch.equal(loaded["t"], state["t"])
    marker = tmp_path / "ran"
    torch.save({"x": Exploit(marker)}, tmp_path / "crafted.pt")
    with pytest.raises(UnsafeStateError, match="weights_only"):
        load_tensors(tmp_path / "crafted.pt")
    assert not marker.exists()


def test_resume_takes_only_run_dirs_this_user_owns_and_agentforge_wrote(tmp_path, monkeypatch):
    from agentforge.schema.compose import compose_config
    from agentforge.training.config import foreign_run, resolve_resume_dir

    run = tmp_path / "runs" / "earlier"
    (run / "checkpoints" / "iter_000001").mkdir(parents=True)
    assert "no config.yaml" in foreign_run(run)
    (run / "config.yaml").write_text("command: train\n")
    assert foreign_run(run) is None
    cfg = compose_config(["recipe=debug", "command=train", f"resume={run}"], run_dir=str(tmp_path / "runs" / "now"))
    assert resolve_resume_dir(cfg) == run
    monkeypatch.setattr(os, "getuid", lambda: os.stat(run).st_uid + 1)  # the same dir, seen by another user
    with pytest.raises(ConfigError, match="belongs to another user"):
        resolve_resume_dir(cfg)
    newest = compose_config(["recipe=debug", "command=train", "resume=true"], run_dir=str(tmp_path / "runs" / "now"))
    with pytest.raises(ConfigError, match="found no earlier run"):  # passed over, not taken
        resolve_resume_dir(newest)
