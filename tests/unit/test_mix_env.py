"""`env=mix`: weighted task sampling, groups that never span envs, the mix env handing each task to its member,
per-member templates and metrics, and config errors that name the problem."""

from collections import Counter

import numpy as np
import pytest

from agentforge.algorithms import GRPO, GiGPO, TurnBatch
from agentforge.commands.config_check import config_problems
from agentforge.commands.preflight import check_env
from agentforge.envs.mix import MixEnv
from agentforge.envs.task_keys import reserve_held_out
from agentforge.errors import ConfigError
from agentforge.rollout.metrics import rollout_summary
from agentforge.rollout.workflow import RolloutStats
from agentforge.schema.compose import compose_config
from agentforge.tasks import SPLIT_SEED_BASE, MixedTaskSampler, task_sampler
from agentforge.types import Group, Task, Trajectory, Turn

pytestmark = pytest.mark.unit

MEMBERS = {"sokoban": {"weight": 2.0, "dim_room": [6, 6], "max_steps": 6}, "search_qa": {"weight": 1.0}}


def test_tasks_are_sampled_by_weight_every_prefix_close_to_it():
    sampler = MixedTaskSampler({"sokoban": 2.0, "search_qa": 1.0})
    tasks = sampler.sample(30)
    counts = Counter(t.env for t in tasks)
    assert counts == {"sokoban": 20, "search_qa": 10}
    for n in range(1, 31):  # smooth round robin: no prefix is more than one task off its share
        share = sum(t.env == "sokoban" for t in tasks[:n])
        assert abs(share - n * 2 / 3) < 1
    # each env's seeds are consecutive in its split, as a plain sampler of that env hands them out
    assert [t.seed for t in tasks if t.env == "search_qa"] == list(range(10))
    assert [t.seed for t in tasks if t.env == "sokoban"] == list(range(20))
    uneven = Counter(t.env for t in MixedTaskSampler({"a": 0.1, "b": 0.9}).sample(100))
    assert uneven == {"a": 10, "b": 90}


def test_the_mixed_sampler_resumes_where_it_stopped():
    sampler = MixedTaskSampler({"sokoban": 1.0, "search_qa": 3.0}, seed_offset=5)
    sampler.sample(7)
    resumed = MixedTaskSampler({"sokoban": 1.0, "search_qa": 3.0}, seed_offset=5)
    resumed.load_state_dict(sampler.state_dict())
    assert resumed.sample(9) == sampler.sample(9)
    assert resumed.position == 16
    with pytest.raises(ConfigError, match="not a mixed one"):
        resumed.load_state_dict({"position": 3})


def test_held_out_tasks_give_every_member_its_own_eval_split():
    held_out, keyer = reserve_held_out("mix", {"envs": MEMBERS}, reserve=8)
    keyer.close()
    tasks = held_out.tasks("eval", 3)
    assert Counter(t.env for t in tasks) == {"sokoban": 3, "search_qa": 3}
    assert all(t.split == "eval" and t.seed >= SPLIT_SEED_BASE["eval"] for t in tasks)
    assert {t.env for t in held_out.tasks("test", 8)} == {"sokoban", "search_qa"}
    assert isinstance(task_sampler("mix", {"envs": MEMBERS}), MixedTaskSampler)
    assert task_sampler("mix", None).weights == {"sokoban": 1.0, "search_qa": 1.0}  # envs: null, the defaults


def test_the_mix_env_plays_each_task_on_the_member_it_names():
    env = MixEnv(envs=MEMBERS)
    sokoban = env.reset(Task("sokoban", 3))
    assert "#" in sokoban.text and sokoban.admissible == ["up", "down", "left", "right"]
    assert env.step("up").info is not None
    question = env.reset(Task("search_qa", 3))
    assert "Question:" in question.text
    from agentforge.envs.search_qa import SearchQAEnv
    from agentforge.envs.sokoban import SokobanEnv

    assert question.text == SearchQAEnv().reset(Task("search_qa", 3)).text  # the member's own episode
    assert sokoban.text == SokobanEnv(dim_room=[6, 6], max_steps=6).reset(Task("sokoban", 3)).text
    with pytest.raises(ConfigError, match="members are sokoban, search_qa"):
        env.reset(Task("webshop", 0))
    env.close()


@pytest.mark.parametrize("envs, message", [
    ({}, "needs env.envs"),
    ({"sokoban": {"weight": 0}}, "weight must be a positive number"),
    ({"sokoban": {"weight": "lots"}}, "weight must be a positive number"),
    ({"mix": {"weight": 1}}, "cannot contain another mix"),
])
def test_bad_mixes_are_refused_with_the_fix(envs, message):
    with pytest.raises(ConfigError, match=message):
        MixEnv(envs=envs)


def test_preflight_checks_every_member_with_its_own_options():
    check_env("mix", {"envs": MEMBERS}, ["train", "eval"])
    with pytest.raises(ConfigError, match="env 'sokoban' does not take these options"):
        check_env("mix", {"envs": {"sokoban": {"weight": 1, "rooms": 3}}}, ["train"])
    with pytest.raises(ConfigError, match="nope"):
        check_env("mix", {"envs": {"nope": {"weight": 1}}}, ["train"])


def turn(reward: float, anchor: str) -> Turn:
    return Turn(prompt_ids=[1], response_ids=[2], logprobs=[-0.1], forced_mask=[False], response_text="",
                action="a", valid=True, reward=reward, env_reward=reward, anchor=anchor, observation="")


def mixed_groups() -> list[Group]:
    """Two groups per env; every episode sees the same anchor, so only the grouping keeps envs apart."""
    groups = []
    for env, base in (("sokoban", 10.0), ("search_qa", 0.0), ("sokoban", 20.0), ("search_qa", 1.0)):
        task = Task(env, len(groups))
        groups.append(Group(task, [Trajectory(task, i, [turn(base + i, "same")], won=i == 1) for i in range(2)]))
    return groups


def test_advantages_are_grouped_within_one_env_only():
    groups = mixed_groups()
    batch = TurnBatch.from_groups(groups)
    for g in range(batch.n_groups):  # no group (nor GiGPO step group) holds turns of two envs
        envs = {groups[g].task.env}
        assert len(envs) == 1
    step_envs: dict[int, set[str]] = {}
    for step, g in zip(batch.step_id, batch.group_id, strict=True):
        step_envs.setdefault(int(step), set()).add(groups[int(g)].task.env)
    assert all(len(v) == 1 for v in step_envs.values())
    # each group's advantages are relative to its own two episodes: scale-free across envs with rewards 10x apart
    for algorithm in (GRPO(), GiGPO()):
        adv = np.asarray(algorithm.advantages(groups))
        assert adv.reshape(4, 2).sum(axis=1) == pytest.approx(np.zeros(4), abs=1e-6)
        assert adv[0] == pytest.approx(adv[2]) and adv[0] == pytest.approx(adv[4])


def test_rollout_metrics_are_reported_per_env():
    summary = rollout_summary(mixed_groups(), RolloutStats())
    assert summary["sokoban/success"] == 0.5 and summary["search_qa/success"] == 0.5
    assert summary["sokoban/episodes"] == 4 and summary["search_qa/mean_return"] == pytest.approx(1.0)
    single = rollout_summary(mixed_groups()[:1], RolloutStats())
    assert not any("/" in key for key in single)


def test_the_mix_recipe_composes_with_each_members_template():
    from agentforge.commands.builders import build_templates

    cfg = compose_config(["recipe=grpo_mix", "command=train"])
    assert config_problems(cfg) == []
    template, templates = build_templates(cfg)
    assert set(templates) == {"sokoban", "search_qa"} and template is templates["sokoban"]
    assert templates["search_qa"].action_tag != templates["sokoban"].action_tag
