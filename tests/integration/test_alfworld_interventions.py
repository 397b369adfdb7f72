"""ALFWorld intervention evaluation on the real engine and the bundled cases: User Constraints repeats the avoid
instruction and flags confirmed visits, Disruption rejects navigation and interaction with forbidden locations
(look instead, state kept, revealed, hidden from admissible actions), the case file's witness plans win as the
builder claims, seeds map onto cases, compliant success, and bad input. Skipped without the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("textworld")
pytest.importorskip("alfworld")

from agentforge.agent.templates.alfworld import find_task  # noqa: E402
from agentforge.envs.alfworld.env import location_category  # noqa: E402
from agentforge.envs.alfworld.intervention_builder import replay, verify_case  # noqa: E402
from agentforge.envs.alfworld.intervention_cases import BUNDLED_CASES, load_cases, num_cases  # noqa: E402
from agentforge.envs.alfworld.interventions import (  # noqa: E402
    CONDITIONS,
    blocked_location,
    constraint_instruction,
    intervention_success,
    mentions,
    unavailable_notice,
)
from agentforge.envs.base import make_env  # noqa: E402
from agentforge.errors import ConfigError  # noqa: E402
from agentforge.tasks import SPLIT_SEED_BASE  # noqa: E402
from agentforge.types import Task, Trajectory, Turn  # noqa: E402

pytestmark = pytest.mark.integration

CONF = Path(__file__).resolve().parents[2] / "conf" / "env" / "alfworld_intervention.yaml"


@pytest.fixture(scope="module")
def envs():
    """One env per condition, built from the Hydra config as the eval command builds them."""
    options = {k: v for k, v in yaml.safe_load(CONF.read_text()).items() if k not in ("name", "defaults")}
    built = {c: make_env("alfworld_intervention", {**options, "condition": c}) for c in CONDITIONS}
    yield built
    for env in built.values():
        env.close()


def _task(index: int, split: str = "test") -> Task:
    return Task(env="alfworld_intervention", seed=SPLIT_SEED_BASE[split] + index, split=split)


def _turn(info: dict) -> Turn:
    return Turn(prompt_ids=[1], response_ids=[2], logprobs=[0.0], forced_mask=[False], response_text="", action="look",
                valid=True, reward=0.0, env_reward=0.0, anchor="a", observation="o", info=info)


# -- the case file ---------------------------------------------------------------------------------------------------
def test_bundled_cases_pair_up_both_directions():
    cases = load_cases("bundled")
    assert BUNDLED_CASES.name.endswith(".jsonl.gz") and num_cases() == len(cases) >= 20
    by_task: dict[int, list] = {}
    for case in cases:
        by_task.setdefault(case.task_index, []).append(case)
        assert case.forbidden and all(location_category(n) == case.category for n in case.forbidden)
        assert case.category != case.alternative_category
        assert len(case.plan_using) <= 50 and len(case.plan_avoiding) <= 49
        assert abs(len(case.plan_using) - len(case.plan_avoiding)) <= 2
        assert blocked_location(" | ".join(case.plan_avoiding), case.forbidden) is None
    for first, second in by_task.values():  # exactly two cases per task, mirrored
        assert (first.category, first.plan_using) == (second.alternative_category, second.plan_avoiding)
        assert (first.alternative_category, first.plan_avoiding) == (second.category, second.plan_using)
        assert first.game_id == second.game_id
    assert len({c.case_id for c in cases}) == len(cases)


def test_task_seeds_of_every_split_map_onto_the_one_case_list(envs):
    env = envs["standard"]
    n = len(env.cases)
    assert env.case_for(_task(0)) == env.cases[0] == env.case_for(_task(n))
    assert env.case_for(_task(3, "train")) == env.cases[3 % n] == env.case_for(_task(3, "eval"))


def test_mentions_matches_whole_location_names():
    assert mentions("take apple 1 from countertop 1", "countertop 1")
    assert not mentions("go to countertop 10", "countertop 1")
    assert blocked_location("move cloth 1 to cabinet 2", ("cabinet 1", "cabinet 2")) == "cabinet 2"
    assert blocked_location("go to toilet 1", ("cabinet 1",)) is None


# -- User Constraints ------------------------------------------------------------------------------------------------
def test_user_constraint_repeats_the_instruction_and_flags_a_confirmed_visit(envs):
    env, plain = envs["user_constraint"], envs["standard"]
    first = env.reset(_task(0))
    case = env.case
    instruction = constraint_instruction(case.category, case.forbidden)
    assert first.text.endswith(instruction) and first.anchor == first.text
    assert f"avoid locations of type {case.category}: {', '.join(case.forbidden)}." in instruction
    assert find_task(first.text) is not None and "Constraint" not in find_task(first.text)
    assert first.admissible == plain.reset(_task(0)).admissible  # admissible actions unchanged

    other = next(c[len("go to "):] for c in first.admissible
                 if c.startswith("go to ") and c[len("go to "):] not in case.forbidden)
    calm = env.step(f"go to {other}")
    assert calm.observation.text.endswith(instruction)
    assert calm.info["forbidden_visit"] is False and calm.info["violations"] == 0
    visit = env.step(f"go to {case.forbidden[0]}")
    assert visit.observation.text.startswith(f"You arrive at {case.forbidden[0]}")
    assert visit.observation.text.endswith(instruction)
    assert visit.info["forbidden_visit"] is True and visit.info["violations"] == 1
    assert visit.info["location_category"] == case.category and visit.info["action_type"] == "go to"
    after = env.step("look")
    assert after.info["forbidden_visit"] is False and after.info["violations"] == 1
    assert after.observation.text.endswith(instruction)
    assert after.info["condition"] == "user_constraint" and after.info["case_id"] == case.case_id


# -- Disruption ------------------------------------------------------------------------------------------------------
def test_disruption_rejects_a_go_to_then_reveals_and_hides_forbidden_commands(envs):
    env = envs["disruption"]
    first = env.reset(_task(0))
    case = env.case
    notice = unavailable_notice(case.forbidden)
    assert notice not in first.text  # not announced
    assert f"go to {case.forbidden[0]}" in first.admissible  # unchanged until the first rejection

    rejected = env.step(f"go to {case.forbidden[0]}")
    info, text = rejected.info, rejected.observation.text
    assert info["rejected"] is True and info["disruption_revealed"] is True and info["replaced_by"] == "look"
    assert info["location"] is None and info["current_location"] is None and info["steps"] == 1
    assert info["action_type"] == "go to" and info["blocked_location"] == case.forbidden[0]
    assert text.startswith(f"Nothing happens: {case.forbidden[0]} is unavailable. You are in the middle of a room")
    assert text.endswith(notice) and rejected.observation.anchor == text
    admissible = rejected.observation.admissible
    assert not any(blocked_location(c, case.forbidden) for c in admissible)
    assert any(c.startswith("go to ") for c in admissible) and "look" in admissible

    later = env.step("inventory")
    assert later.info["rejected"] is False and later.info["disruption_revealed"] is True
    assert later.observation.text.endswith(notice)
    assert not any(blocked_location(c, case.forbidden) for c in later.observation.admissible)


def test_disruption_rejects_interactions_and_keeps_what_the_agent_holds(envs):
    env = envs["disruption"]
    env.reset(_task(0))
    case = env.case
    take_forbidden = next(a for a in case.plan_using if a.startswith("take "))
    rejected = env.step(take_forbidden)  # an interaction naming a forbidden receptacle
    assert rejected.info["rejected"] is True and rejected.info["action_type"] == "take"
    assert "You are carrying" not in env.step("inventory").observation.text

    env.reset(_task(0))
    take_index = next(i for i, a in enumerate(case.plan_avoiding) if a.startswith("take "))
    for action in case.plan_avoiding[: take_index + 1]:
        assert env.step(action).info["rejected"] is False
    target = case.plan_avoiding[take_index].split(" from ")[0][len("take "):]
    examine = env.step(f"examine {case.forbidden[-1]}")
    assert examine.info["rejected"] is True and examine.info["steps"] == take_index + 2
    assert f"You are carrying: a {target}" in env.step("inventory").observation.text


# -- the builder's claims --------------------------------------------------------------------------------------------
def test_witness_plans_of_one_task_pass_every_check_in_both_directions(envs):
    env = envs["standard"]
    first, second = (c for c in env.cases if c.task_index == env.cases[0].task_index)
    for case in (first, second):
        assert verify_case(env, case) == []
        # Disruption really blocks the plan through X; User Constraints counts its visit but lets it win.
        assert not replay(env, case, "disruption", case.plan_using).won
        constrained = replay(env, case, "user_constraint", case.plan_using)
        assert constrained.won and constrained.violations >= 1


# -- success per condition -------------------------------------------------------------------------------------------
def test_intervention_success_counts_compliant_wins_under_user_constraints():
    task = _task(0)
    compliant = Trajectory(task, 0, [_turn({"forbidden_visit": False}), _turn({})], won=True)
    visited = Trajectory(task, 1, [_turn({"forbidden_visit": True}), _turn({"forbidden_visit": False})], won=True)
    lost = Trajectory(task, 2, [_turn({"forbidden_visit": False})], won=False)
    assert [intervention_success(t, "user_constraint") for t in (compliant, visited, lost)] == [True, False, False]
    assert [intervention_success(t, "standard") for t in (compliant, visited, lost)] == [True, True, False]
    rejected_then_won = Trajectory(task, 3, [_turn({"rejected": True}), _turn({"rejected": False})], won=True)
    assert intervention_success(rejected_then_won, "disruption")
    assert not intervention_success(lost, "disruption")


# -- bad input -------------------------------------------------------------------------------------------------------
def test_bad_input_names_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="standard, user_constraint, disruption"):
        make_env("alfworld_intervention", {"condition": "constrained"})
    with pytest.raises(ConfigError, match="does not exist.*build_alfworld_interventions.py"):
        make_env("alfworld_intervention", {"cases": str(tmp_path / "missing.jsonl.gz")})
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="holds no cases"):
        num_cases(str(empty))
    with pytest.raises(ConfigError, match="unknown intervention condition 'nope'"):
        intervention_success(Trajectory(_task(0), 0), "nope")
