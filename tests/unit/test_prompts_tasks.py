import pytest

from agentforge.agent.prompts import HistoryEntry, prompt_for
from agentforge.errors import ConfigError
from agentforge.tasks import TaskSampler
from agentforge.types import Observation

pytestmark = pytest.mark.unit


def test_sokoban_prompt_renders_history_window_and_admissible():
    template = prompt_for("sokoban")
    obs = Observation("#P_O#", anchor="#P_O#", admissible=["up", "down", "left", "right"])
    history = [HistoryEntry("#_P_O#", "left"), HistoryEntry("#P__O#", "right")]
    messages = template.messages(obs, history, step=5)
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[-1]["content"]
    assert "[Observation 3]" in user and "[Your action 4] right" in user
    assert "taken 4 step(s)" in user and "up, down, left, right" in user and "#P_O#" in user


def test_few_shot_adds_an_example_exchange():
    template = prompt_for("sokoban")
    obs = Observation("g", anchor="g", admissible=["up"])
    roles = [m["role"] for m in template.messages(obs, [], 1, use_few_shot=True)]
    assert roles == ["system", "user", "assistant", "user"]


def test_unknown_env_prompt_lists_valid_names():
    with pytest.raises(ConfigError, match="sokoban"):
        prompt_for("nope")


def test_task_sampler_splits_are_disjoint_and_resumable():
    train = TaskSampler("sokoban", "train")
    first = train.sample(3)
    assert [t.seed for t in first] == [0, 1, 2]
    state = train.state_dict()
    resumed = TaskSampler("sokoban", "train")
    resumed.load_state_dict(state)
    assert resumed.sample(2) == train.sample(2)
    assert TaskSampler("sokoban", "eval").sample(1)[0].seed >= 1_000_000
    with pytest.raises(ConfigError, match="valid splits"):
        TaskSampler("sokoban", "nope")


def test_cli_moves_hydra_flags_before_overrides():
    from agentforge.cli import split_hydra_args

    flags, overrides = split_hydra_args(["recipe=debug", "--multirun", "seed=0,1", "--cfg", "job", "-cd", "my/conf"])
    assert flags == ["--multirun", "--cfg", "job", "-cd", "my/conf"]
    assert overrides == ["recipe=debug", "seed=0,1"]
    assert split_hydra_args(["a=1", "--info"]) == (["--info"], ["a=1"])
