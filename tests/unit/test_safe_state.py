"""Resume and eval cannot run code from a run dir (issue 57, item 2): checkpoint state is JSON, tensors read with
torch's weights_only loader, or agentforge's own dataclasses as plain values and tensors read by that loader; a
crafted pickle is refused without running; resume takes only run dirs this user owns that agentforge wrote."""

from __future__ import annotations

import dataclasses
import enum
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from agentforge.errors import ConfigError
from agentforge.reliability.object_state import FORMAT, load_objects, save_objects
from agentforge.reliability.safe_state import (
    UnsafeStateError,
    load_tensors,
    read_rng,
    save_tensors,
    set_rng_state,
    write_rng,
)
from agentforge.training.asynchronous import PlayedBatch
from agentforge.types import Group, LossRole, Task, Trajectory, Turn

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


@dataclasses.dataclass
class Theirs:
    """A dataclass an env of someone else's puts in a turn's info: kept as its text, never rebuilt."""

    x: int


class Color(enum.Enum):
    RED = 1


def played_batch() -> PlayedBatch:
    trajectory = Trajectory(task=Task("sokoban", 7, "train", options=(("level", 2),)), rollout_index=1)
    info = {"replica": 0, "score": np.float32(0.25), "where": Path("/tmp/x"), "nan": float("nan"),
            "theirs": Theirs(1), "color": Color.RED, "names": np.array(["a", "b"]), "flag": np.bool_(True)}
    trajectory.turns.append(Turn(prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.5], forced_mask=[False],
                                 response_text="up", action="up", valid=True, reward=1.0, env_reward=1.0,
                                 anchor=b"\x00room", observation="room", role=LossRole.REASONING, info=info))
    group = Group(task=trajectory.task, trajectories=[trajectory])
    result = {"groups": [group], "lengths": np.arange(4, dtype=np.int32), "pairs": {(1, 2): {3, 4}}}
    return PlayedBatch(iteration=3, result=result, played=[group], dynamic_metrics={"d": 1.0}, seconds=2.5)


def test_pending_batches_round_trip_as_plain_values_and_keep_shared_objects(tmp_path):
    batch = played_batch()
    save_objects([batch], tmp_path / "pending.pt")
    torch.load(tmp_path / "pending.pt", weights_only=True)  # nothing but tensors and plain values in the file
    loaded = load_objects(tmp_path / "pending.pt")[0]
    assert isinstance(loaded, PlayedBatch) and loaded.iteration == 3 and loaded.seconds == 2.5
    turn = loaded.played[0].trajectories[0].turns[0]
    assert turn.response_ids == [3] and turn.logprobs == [-0.5] and turn.info["replica"] == 0
    assert loaded.played[0].task == Task("sokoban", 7, "train", options=(("level", 2),))
    assert turn.info["score"] == np.float32(0.25) and turn.info["score"].dtype == np.float32
    assert turn.info["where"] == Path("/tmp/x") and np.isnan(turn.info["nan"])
    assert turn.info["theirs"] == "Theirs(x=1)" and turn.info["color"] == "<Color.RED: 1>"
    assert turn.info["names"] == ["a", "b"] and turn.info["flag"] == np.bool_(True)
    assert turn.role is LossRole.REASONING and turn.anchor == b"\x00room"
    assert loaded.played[0].trajectories[0].spans == []
    assert np.array_equal(loaded.result["lengths"], np.arange(4, dtype=np.int32))
    assert loaded.result["pairs"] == {(1, 2): {3, 4}}
    assert loaded.result["groups"][0] is loaded.played[0]  # one object, as it was when saved


def test_a_crafted_state_file_never_runs_and_names_what_it_asked_for(tmp_path):
    marker = tmp_path / "ran"
    torch.save({"format": FORMAT, "value": [Exploit(marker)]}, tmp_path / "pickled.pt")
    with pytest.raises(UnsafeStateError, match="weights_only"):
        load_objects(tmp_path / "pickled.pt")
    named = [("object", "os:system"), ("object", "subprocess:Popen"), ("object", "agentforge.cli:main"),
             ("enum", "builtins:eval"), ("enum", "agentforge.types:Task"), ("object", "agentforge.types:LossRole")]
    for kind, name in named:  # a dataclass is never called as an enum, nor an enum built as a dataclass
        entry = {"__af__": kind, "class": name, "id": 0, "fields": {}, "value": "x"}
        torch.save({"format": FORMAT, "value": entry}, tmp_path / "named.pt")
        with pytest.raises(UnsafeStateError, match=name):
            load_objects(tmp_path / "named.pt")
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
    from agentforge.commands.train_checks import foreign_run, resolve_resume_dir
    from agentforge.schema.compose import compose_config

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
